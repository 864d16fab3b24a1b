"""Rank only what the evidence separates; show no A where there is none; every forecast has
an interval and says how far it reaches; result files are never overwritten silently."""
import doctest
import importlib
import json
import os

import numpy as np
import pandas as pd
from matplotlib.container import BarContainer, ErrorbarContainer

from analysis import FitOptions, analyze_extrapolation, analyze_sweep, format_leaderboard, leaderboard
from analysis.io import read_sweep
from analysis.models import sigmoid
from analysis.plots import plot_params

BOOT = FitOptions(n_boot=100)
# quick-start-like curves: 40 evals that end at 2.3e12 FLOPs, before C_mid = 3e12 -> A_unidentified
QC = np.concatenate([[0.0], np.linspace(6e10, 2.3e12, 40)])


def curve(name, A, *, noise=0.01, seed=0, compute=QC, B=1.5, C_mid=3e12, **cols):
    rng = np.random.default_rng(seed)
    reward = sigmoid(compute, A, B, C_mid, 0.2) + np.r_[0.0, rng.normal(0, noise, compute.size - 1)]
    return pd.DataFrame({"run": name, "compute": compute, "reward": reward, **cols})


def quick_start():
    """Three arms whose rewards at the end differ by 0.003-0.013: noise, not evidence."""
    return pd.concat([curve("cispo", 0.80, seed=1, loss="cispo"), curve("dapo", 0.79, seed=2, loss="dapo"),
                      curve("gspo", 0.81, seed=3, loss="gspo")], ignore_index=True)


def test_tie_ranks_doctests_hold():
    result = doctest.testmod(importlib.import_module("analysis.leaderboard"))   # the module, not the function
    assert result.attempted >= 2 and result.failed == 0


def test_unidentified_arms_that_the_intervals_do_not_separate_share_rank_one():
    board = leaderboard(quick_start(), options=BOOT)
    assert (board["status"] == "A_unidentified").all()
    assert board["rank"].tolist() == [1, 1, 1]             # was 1, 2, 3
    assert board["tie_group"].nunique() == 1 and board["rank_basis"].str.contains("tied").all()
    text = format_leaderboard(board)
    assert text.count("1=") == 3 and "the evidence does not order them" in text
    assert "Train longer (more steps) or add seeds" in text


def test_a_copy_of_a_run_under_another_name_ties_with_it():
    original = curve("cispo", 0.6, compute=np.concatenate([[0.0], np.linspace(1e11, 2e13, 60)]), noise=0.005)
    copy = original.assign(run="cispo_copy")
    other = curve("worse", 0.45, compute=original["compute"].to_numpy(), noise=0.005, seed=5)
    board = leaderboard(pd.concat([original, copy, other]), options=BOOT).set_index("run")
    assert (board["status"] == "ok").all()
    assert board.loc["cispo", "rank"] == board.loc["cispo_copy", "rank"] == 1     # was 1 and 2
    assert board.loc["worse", "rank"] == 3                                         # separated: its own rank


def test_unidentified_rows_carry_no_a_in_the_table_the_csv_or_the_plot(tmp_path):
    points = pd.concat([quick_start(), curve("ident", 0.6, compute=np.concatenate([[0.0], np.linspace(1e11, 3e13, 60)]),
                                             seed=7, loss="ident")], ignore_index=True)
    analyze_sweep(points, tmp_path, BOOT, plots="summary", quiet=True)
    csv = pd.read_csv(tmp_path / "leaderboard.csv").set_index("run")
    unid = csv[csv["status"] == "A_unidentified"]
    assert len(unid) == 3
    assert unid[["A", "A_lo", "A_hi", "A_profile_lo", "A_profile_hi"]].isna().all().all()
    assert unid["A_raw"].notna().all() and (unid["A_raw_lo"] <= unid["A_raw_hi"]).all()   # the diagnostic
    assert np.isfinite(csv.loc["ident", "A"]) and np.isnan(csv.loc["ident", "A_raw"])

    board = leaderboard(points, options=BOOT)
    fig = plot_params(board)
    a_panel = fig.axes[0]
    assert not [c for ax in fig.axes for c in ax.containers if isinstance(c, BarContainer)]   # no bare bars
    drawn = [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    for container in drawn:                                  # every plotted value carries its whiskers
        marker, _, (whiskers,) = container
        assert container.has_xerr and len(whiskers.get_segments()) == len(marker.get_xdata()) > 0
    a_points = [c for c in a_panel.containers if isinstance(c, ErrorbarContainer)]
    assert sum(len(c[0].get_xdata()) for c in a_points) == 1       # only the identified run has an A
    assert sum(t.get_text() == "not identified" for t in a_panel.texts) == 3


def test_rank_at_a_target_compute_ties_what_its_intervals_do_not_separate():
    C = np.concatenate([[0.0], np.linspace(1e11, 2e13, 60)])
    points = pd.concat([curve("a", 0.6, compute=C, noise=0.004, seed=1), curve("b", 0.601, compute=C, noise=0.004, seed=2),
                        curve("c", 0.4, compute=C, noise=0.004, seed=3)])
    board = leaderboard(points, options=BOOT, target_compute=1e13).set_index("run")
    assert board.loc["a", "rank_target"] == board.loc["b", "rank_target"] == 1     # was 1 and 2
    assert board.loc["c", "rank_target"] == 3


def test_a_target_beyond_the_data_warns_and_says_how_far():
    board = leaderboard(quick_start(), options=BOOT, target_compute=1e13)
    (warning,) = board.attrs["warnings"]
    assert "4.3x beyond the last fitted compute" in warning                   # 1e13 / 2.3e12
    assert board["target_beyond"].round(2).tolist() == [4.35] * 3
    assert (board["pred_target_lo"] <= board["pred_target"]).all() and (board["pred_target"] <= board["pred_target_hi"]).all()
    assert "WARNING: C*=1e+13 lies 4.3x beyond" in format_leaderboard(board)


def test_forecasts_have_intervals_and_say_how_far_they_reach(tmp_path, capsys):
    points = pd.concat([curve(f"r{i}", 0.6, compute=np.concatenate([[0.0], np.linspace(1e11, 2e13, 60)]), seed=i)
                        for i in range(2)])
    check = analyze_extrapolation(points, tmp_path, plots="none")
    table = pd.read_csv(tmp_path / "extrapolation.csv")
    assert table["pred_final_lo"].notna().all() and table["pred_final_hi"].notna().all()
    assert ((table["pred_final_lo"] <= table["pred_final"]) & (table["pred_final"] <= table["pred_final_hi"])).all()
    assert table["beyond"].round(6).tolist() == [2.0, 2.0]                    # fit on half: forecast 2x out
    printed = capsys.readouterr().out
    assert "2x beyond the fitted compute" in printed and "predicted" in printed
    assert check.per_run["pred_final_hi"].gt(check.per_run["pred_final_lo"]).all()


def test_fit_until_forecast_columns_carry_an_interval():
    C = np.concatenate([[0.0], np.linspace(1e11, 2e13, 60)])
    board = leaderboard(curve("a", 0.6, compute=C), options=FitOptions(n_boot=50, fit_until=1e13))
    assert board.loc[0, "pred_final_lo"] <= board.loc[0, "pred_final"] <= board.loc[0, "pred_final_hi"]


def test_runs_of_different_lengths_or_studies_are_ranked_together_only_with_a_note(make_run, tmp_path):
    C = np.concatenate([[0.0], np.linspace(1e11, 2e13, 40)])
    for name, steps, study in (("long", 1000, "qs"), ("short", 20, "other")):
        reward = sigmoid(C, 0.6, 1.5, 3e12, 0.2)
        make_run(f"s/{name}", compute=C, reward=reward, loss=name, extra={"train": {"steps": steps}, "study": study})
    board = leaderboard(read_sweep(tmp_path / "s"), options=FitOptions(n_boot=0))
    text = format_leaderboard(board)
    assert "mix 2 training lengths (1000: 1 run(s), 20: 1 run(s))" in text
    assert "mix 2 studies" in text


def test_a_different_analysis_moves_the_old_results_aside_and_says_so(make_run, tmp_path, capsys):
    C = np.concatenate([[0.0], np.linspace(1e11, 2e13, 40)])
    runs = [make_run(f"s/{n}", compute=C, reward=sigmoid(C, A, 1.5, 3e12, 0.2), loss=n)
            for n, A in (("a", 0.6), ("b", 0.5))]
    out = tmp_path / "s"
    options = FitOptions(n_boot=0)
    analyze_sweep(out, out, options, runs=runs, plots="none", quiet=True)
    first = (out / "leaderboard.csv").read_text()
    analyze_sweep(out, out, options, runs=runs, plots="none")                  # same runs, same settings
    assert "replacing the fit results" in capsys.readouterr().out
    assert not (out / "previous").exists()
    board = analyze_sweep(out, out, options, runs=runs[:1], plots="none")       # another set of runs
    assert "were moved to" in capsys.readouterr().out
    (kept,) = (out / "previous").iterdir()
    assert (kept / "leaderboard.csv").read_text() == first
    assert json.loads((kept / "analysis.json").read_text())["fit"]["runs"] == sorted(str(r.resolve()) for r in runs)
    assert len(board) == 1 and len(pd.read_csv(out / "leaderboard.csv")) == 1


def test_a_sweep_reads_runs_it_links_in_from_other_studies(make_run, tmp_path):
    C = np.concatenate([[0.0], np.linspace(1e11, 2e13, 40)])
    source = make_run("other/loss=cispo-abc", compute=C, reward=sigmoid(C, 0.6, 1.5, 3e12, 0.2))
    (tmp_path / "new").mkdir()
    os.symlink("../other/loss=cispo-abc", tmp_path / "new" / "loss=cispo-abc")
    points = read_sweep(tmp_path / "new")
    assert points["run_dir"].map(lambda d: os.path.realpath(d)).unique().tolist() == [str(source.resolve())]
    assert len(points) == len(C)


def test_the_console_counts_the_files_it_wrote(tmp_path, capsys):
    analyze_sweep(quick_start(), tmp_path, FitOptions(n_boot=0))
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".csv", ".png"))
    assert len(written) == 6                        # leaderboard.csv, overview.png, params.png, 3 run plots
    assert f"wrote 6 files in {tmp_path}: leaderboard.csv, overview.png, params.png, 3 run plots" in capsys.readouterr().out
