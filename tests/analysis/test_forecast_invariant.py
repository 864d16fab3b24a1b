"""A forecast at compute C knows only the evals up to C (docs/analysis.md, "Forecasts").

Through the real entry point, `python -m analysis fit --fit-until C` on a whole run and
`python -m analysis extrapolate --fraction f` (C = f x the run's last compute) must give the
very numbers, bit for bit, of `python -m analysis fit` on the same runs truncated at C: the
same points, R0, threshold, fit, intervals and flags. The runs are built so that each leak
the fitter could have shows: the epoch reaches 1 only after C (an "auto" threshold taken from
the whole run would use it), an eval after C is missing (a whole-run count would flag
nan_dropped), and the run goes on for twice C (a threshold of 10% of the run is twice 10% of C).
"""
import subprocess
import sys

import numpy as np
import pandas as pd

from analysis.models import sigmoid
from tests.analysis.conftest import write_run

FIT_COLUMNS = ["status", "A", "A_lo", "A_hi", "A_profile_lo", "A_profile_hi", "B", "B_lo", "B_hi",
               "C_mid", "C_mid_lo", "C_mid_hi", "R0", "r0_source", "n_points", "n_dropped", "min_compute",
               "sse", "rmse", "fit_last_compute", "flags", "reasons"]
LAST = 3.0e15
FRACTION = 0.5


def runs(root, until=None):
    """Two runs on the scalerl log eval schedule (step 0, then 16 evals from 1/30 of the run)."""
    compute = np.concatenate([[0.0], np.geomspace(LAST / 30, LAST, 16)])
    epoch = compute / (0.7 * LAST)                       # epoch 1 at 70% of the run: after C
    rng = np.random.default_rng(3)
    for name, A in (("cispo", 0.62), ("dapo", 0.55)):
        reward = sigmoid(compute, A, 1.8, 0.3 * LAST, 0.3) + rng.normal(0, 0.004, compute.size)
        reward[-2] = np.nan                              # a missing eval after C
        keep = slice(None) if until is None else compute <= until
        write_run(root, f"{name}-s0", compute=compute[keep], reward=reward[keep], loss=name,
                  epoch=list(epoch[keep]))
    return root


def analysis(*args):
    done = subprocess.run([sys.executable, "-m", "analysis", *map(str, args), "--n-boot", "60",
                           "--plots", "none", "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def table(path, index="run"):
    return pd.read_csv(path, dtype=str, keep_default_na=False).set_index(index)   # the text, bit for bit


def test_a_forecast_at_c_is_the_fit_of_the_run_truncated_at_c(tmp_path):
    until = FRACTION * LAST
    whole, cut = runs(tmp_path / "whole"), runs(tmp_path / "cut", until=until)
    analysis("fit", whole, "--out", tmp_path / "early", "--fit-until", repr(until))
    analysis("fit", cut, "--out", tmp_path / "truncated")
    analysis("extrapolate", whole, "--out", tmp_path / "ext", "--fraction", FRACTION)
    early, truncated = table(tmp_path / "early/leaderboard.csv"), table(tmp_path / "truncated/leaderboard.csv")
    runs_ = ["cispo-s0", "dapo-s0"]
    assert early.loc[runs_, FIT_COLUMNS].equals(truncated.loc[runs_, FIT_COLUMNS])
    # the fits are real ones, with the threshold of what was seen: 10% of C, not the run's epoch 1
    assert set(early.loc[runs_, "status"]) <= {"ok", "A_unidentified"}
    assert float(early.at["cispo-s0", "min_compute"]) == 0.1 * float(early.at["cispo-s0", "fit_last_compute"])
    assert set(early.loc[runs_, "flags"]) == {""}
    # extrapolate fits each run on its first half: the same fit, and the same forecast as fit --fit-until
    ext = table(tmp_path / "ext/extrapolation.csv")
    for col in ("status", "B", "C_mid"):
        assert ext.loc[runs_, col].equals(early.loc[runs_, col]), col
    for col in ("pred_final", "pred_final_lo", "pred_final_hi", "obs_final"):
        assert ext.loc[runs_, col].equals(early.loc[runs_, col]), col
