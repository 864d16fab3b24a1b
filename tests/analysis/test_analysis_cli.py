"""End to end: `python -m analysis fit|extrapolate` and analyze_sweep on fake sweeps."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import FitOptions, analyze_sweep
from analysis.__main__ import main
from analysis.cli import build_parser
from analysis.io import InputError
from analysis.synthetic import synthetic_sweep

REQUIRED = ["run", "rank", "status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid", "C_mid_lo",
            "C_mid_hi", "R0", "n_points", "last_compute"]


def test_fit_command_on_a_sweep_directory(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fit", str(sweep), "--out", str(out), "--n-boot", "20", "--target-compute", "2e16"]) == 0
    board = pd.read_csv(out / "leaderboard.csv")
    assert set(REQUIRED + ["loss", "aggregation", "loss_clamp", "pred_target"]) <= set(board.columns)
    status = dict(zip(board["run"], board["status"]))
    assert status["grpo-s0"] == "run_failed" and status["short"] == "too_few_points"
    assert status["0_cispo-s0"] in ("ok", "nan_dropped")
    ranked = board.dropna(subset=["rank"])
    assert ranked.iloc[0]["run"] == "arm arm-cispo"           # A 0.61 beats 0.57
    pngs = {p.name for p in out.glob("*.png")}
    assert {"overview.png", "params.png", "run-0_cispo-s0.png", "run-grpo-s0.png"} <= pngs
    printed = capsys.readouterr().out
    assert "run_failed" in printed and "CUDA out of memory" in printed and "rank" in printed


def test_fit_command_on_a_csv_with_fit_until_and_paper_grid(tmp_path):
    path = tmp_path / "points.csv"
    synthetic_sweep(2, 40, seed=3).to_csv(path, index=False)
    out = tmp_path / "out"
    main(["fit", str(path), "--out", str(out), "--fit-until", "6000", "--method", "paper_grid",
          "--n-boot", "10", "--plots", "summary", "--quiet"])
    board = pd.read_csv(out / "leaderboard.csv")
    assert {"pred_final", "obs_final", "recipe"} <= set(board.columns)
    assert (board["method"] == "paper_grid").all() and (board["fit_until"] == 6000).all()
    assert not list(out.glob("run-*.png")) and (out / "overview.png").exists()


def test_extrapolate_command(sweep, tmp_path, capsys):
    out = tmp_path / "ext"
    main(["extrapolate", str(sweep), "--fraction", "0.5", "--out", str(out)])
    table = pd.read_csv(out / "extrapolation.csv")
    assert {"run", "fraction", "pred_final", "obs_final", "abs_error"} <= set(table.columns)
    ok = table[table["status"].isin(["ok", "nan_dropped", "A_unidentified"])]
    assert len(ok) == 4 and (ok["fraction"] == 0.5).all()
    assert np.allclose(ok["abs_error"], (ok["pred_final"] - ok["obs_final"]).abs())
    assert "abs error: mean" in capsys.readouterr().out
    assert (out / "extrapolation.png").exists()


def test_analyze_sweep_is_quiet_and_survives_failed_and_short_runs(sweep, tmp_path, capsys):
    # the keyword form scalerl.launch uses at the end of a sweep
    board = analyze_sweep(sweep, tmp_path / "q", options=FitOptions(n_boot=5), quiet=True, plots="none")
    assert capsys.readouterr().out == ""
    assert len(board) == 8                                    # 6 runs + 2 arm rows
    assert (tmp_path / "q" / "leaderboard.csv").exists()
    assert not list((tmp_path / "q").glob("*.png"))


def test_analyze_sweep_on_an_empty_directory_refuses_and_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no runs found"):
        analyze_sweep(tmp_path / "empty", tmp_path / "o", quiet=True)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text, parsed", [("auto", "auto"), ("10%", "10%"), ("none", None), ("5e14", 5e14)])
def test_min_compute_flag(text, parsed):
    args = build_parser().parse_args(["fit", "p", "--out", "o", "--min-compute", text])
    assert args.min_compute == parsed


def test_bad_flags_are_rejected_by_argparse():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fit", "p", "--out", "o", "--min-compute", "ten%"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fit", "p", "--out", "o", "--method", "magic"])


def test_python_dash_m_runs():
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "analysis", "fit", "--help"], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--fit-until" in done.stdout and "--n-boot" in done.stdout
