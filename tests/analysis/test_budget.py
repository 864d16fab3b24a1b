"""The forecast at a compute budget: numbers worked out by hand, P(best) from the bootstrap, the CLI."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.models import sigmoid
from analysis.budget import at_budget
from analysis.synthetic import simulate_curve

REPO = Path(__file__).resolve().parents[2]


def exact_points(arms, compute):
    """Noise-free curves: the fit recovers the parameters, the bootstrap collapses onto them."""
    return pd.DataFrame([{"run": name, "compute": c, "reward": float(sigmoid(c, A, B, C_mid, 0.2))}
                         for name, (A, B, C_mid) in arms.items() for c in compute])


# "fast": A 0.6, B 2, C_mid 100;  "slow": A 0.9, B 1, C_mid 400;  R0 0.2, data up to C = 800.
# R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B):
#   at C = 400:  fast 0.2 + 0.4 / (1 + 1/16) = 0.576471   slow 0.2 + 0.7 / (1 + 1) = 0.55
#   at C = 1600: fast 0.2 + 0.4 / (1 + 1/256) = 0.598444  slow 0.2 + 0.7 / (1 + 1/4) = 0.76
ARMS = {"fast": (0.6, 2.0, 100.0), "slow": (0.9, 1.0, 400.0)}
COMPUTE = np.concatenate([[0.0], np.linspace(40.0, 800.0, 20)])


@pytest.mark.parametrize("budget,expected,winner", [(400.0, {"fast": 0.576471, "slow": 0.55}, "fast"),
                                                    (1600.0, {"fast": 0.598444, "slow": 0.76}, "slow")])
def test_forecast_by_hand(budget, expected, winner):
    table = at_budget(exact_points(ARMS, COMPUTE), budget).set_index("arm")
    for arm, value in expected.items():
        assert table.loc[arm, "pred"] == pytest.approx(value, abs=2e-4)
        assert table.loc[arm, "pred_lo"] == pytest.approx(value, abs=2e-4)   # no noise: a point interval
        assert table.loc[arm, "pred_hi"] == pytest.approx(value, abs=2e-4)
    assert table.index[0] == winner                                      # best first
    assert table.loc[winner, "p_best"] == 1.0 and table["p_best"].sum() == pytest.approx(1.0)
    assert table.loc["slow", "extrapolation"] == pytest.approx(budget / 800.0)


def test_identical_arms_split_the_probability():
    rng = np.random.default_rng(0)
    rows = []
    for name in ("a", "b"):
        c, r, _ = simulate_curve(0.61, 1.92, 2542.0, 0.3, c_end=8000.0, n_points=60, samples=4000, rng=rng)
        rows += [{"run": name, "compute": x, "reward": y} for x, y in zip(c, r)]
    table = at_budget(pd.DataFrame(rows), 16000.0).set_index("arm")
    assert table["p_best"].sum() == pytest.approx(1.0)
    assert 0.2 < table.loc["a", "p_best"] < 0.8          # neither is clearly better
    for arm in "ab":                                     # the true R(16000) = 0.6061 lies in both intervals
        assert table.loc[arm, "pred_lo"] < 0.6061 < table.loc[arm, "pred_hi"]


def test_seeds_of_an_arm_are_forecast_together():
    rows = []
    for seed, scale in ((0, 1.0), (1, 1.02)):
        for c in COMPUTE:
            rows.append({"run": f"slow-s{seed}", "seed": seed, "arm": "slow", "compute": c,
                         "reward": float(sigmoid(c, 0.9, 1.0, 400.0 * scale, 0.2))})
    table = at_budget(pd.DataFrame(rows), 1600.0)
    assert len(table) == 1 and table.loc[0, "n_seeds"] == 2 and table.loc[0, "runs"] == "slow-s0;slow-s1"
    mean = np.mean([sigmoid(1600.0, 0.9, 1.0, 400.0 * s, 0.2) for s in (1.0, 1.02)])
    assert table.loc[0, "pred"] == pytest.approx(mean, abs=2e-4)


def test_budget_command_prints_and_writes_budget_csv_and_png(tmp_path):
    points = tmp_path / "points.csv"
    exact_points(ARMS, COMPUTE).to_csv(points, index=False)
    proc = subprocess.run([sys.executable, "-m", "analysis", "plan", str(points), "--budget", "1600",
                           "--out", str(tmp_path / "out"), "--n-boot", "50"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "0.760 [0.760, 0.760]" in proc.stdout and "slow" in proc.stdout.splitlines()[2]
    table = pd.read_csv(tmp_path / "out" / "plan.csv")
    assert list(table["arm"]) == ["slow", "fast"] and list(table["p_best"]) == [1.0, 0.0]
    assert (tmp_path / "out" / "plan.png").stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "analysis", "plan", str(points), "--budget", "-5",
                          "--out", str(tmp_path / "bad")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--budget" in bad.stderr and not (tmp_path / "bad").exists()
