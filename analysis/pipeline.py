"""The one entry point the CLI and `scalerl.sweep` share: read, fit, rank, plot, write.

    board = analyze_sweep("outputs/sweeps/loss", "results/", FitOptions(n_boot=100), quiet=True)

It never raises on a bad curve or a failed run: those become statuses on the leaderboard.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from analysis import io
from analysis import plots as draw
from analysis.extrapolation import extrapolation_check
from analysis.fit import FitOptions
from analysis.leaderboard import MARGIN, format_leaderboard, leaderboard
from analysis.runs import axis_columns, curves, fit_runs
from analysis.stopping import with_stop_columns

LEADERBOARD_COLUMNS = ["run", "rank", "status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid",
                       "C_mid_lo", "C_mid_hi", "R0", "n_points", "last_compute"]
FORECAST_OPTIONS = FitOptions(n_boot=0)    # extrapolate scores the point fit: skip the bootstrap
AXIS_LABELS = {"compute": "training compute (FLOPs)", "device_hours": "device-hours",
               "tokens": "generated tokens"}


def _load(source, axis):
    return source.copy() if isinstance(source, pd.DataFrame) else io.read_points(source, axis=axis)


def analyze_sweep(path, out_dir, options: FitOptions = FitOptions(), *, axis="compute", margin=MARGIN,
                  target_compute=None, plots="all", wandb=False, wandb_project="scalerl-analysis",
                  wandb_group=None, quiet=False):
    """Fit every run of a sweep (directory, points CSV or points DataFrame); returns the leaderboard.

    options: the fit settings (FitOptions); margin, target_compute: the ranking's.
    Writes out_dir/leaderboard.csv and, unless plots="none", out_dir/overview.png,
    out_dir/params.png and (plots="all") one out_dir/run-<run>.png per run.
    wandb=True also logs a summary W&B run (offline unless configured; see report.py).
    """
    out = Path(out_dir)
    points = _load(path, axis)
    if points.empty:
        board = pd.DataFrame(columns=LEADERBOARD_COLUMNS)
        io.write_csv(board, out / "leaderboard.csv")
        if not quiet:
            print(f"no runs found in {path}")
        return board
    fits = fit_runs(points, options)
    board = leaderboard(points, fits, options, margin=margin, target_compute=target_compute)
    board = with_stop_columns(board, io.read_stop_records(points))      # early-stopped runs: why, and the fit then
    io.write_csv(board, out / "leaderboard.csv")
    figures = []
    is_dir = not isinstance(path, pd.DataFrame) and Path(path).is_dir()
    title = Path(str(path)).name if not isinstance(path, pd.DataFrame) else "sweep"
    label = AXIS_LABELS.get(axis, axis) if is_dir else "compute"       # a CSV's unit is unknown
    if plots != "none":
        data = curves(points)
        figures.append(io.save_figure(draw.plot_overview(board, fits, data, title=title, axis_label=label),
                                      out / "overview.png"))
        figures.append(io.save_figure(draw.plot_params(board, margin=margin, title=title), out / "params.png"))
        if plots == "all":
            for run, fit in fits.items():
                fig = draw.plot_run(fit, *data[run], title=run, axis_label=label, target_compute=target_compute)
                io.save_figure(fig, out / f"run-{io.safe_name(run)}.png")
    if not quiet:
        print(format_leaderboard(board, axes=axis_columns(points)))
        print(f"\nwrote {out / 'leaderboard.csv'}" + (f" and {len(figures)} summary plots" if figures else ""))
    if wandb:
        from analysis.report import log_report
        source = "dataframe" if isinstance(path, pd.DataFrame) else str(path)
        log_report(board, figures, out_dir=out, project=wandb_project, group=wandb_group or title,
                   config={**asdict(options), "source": source, "axis": axis, "margin": margin,
                           "target_compute": target_compute},
                   quiet=quiet)
    return board


def analyze_extrapolation(path, out_dir, options: FitOptions = FORECAST_OPTIONS, *, fraction=0.5,
                          axis="compute", n_final=3, plots="all", quiet=False):
    """Fit each run on its first `fraction` of compute, compare with its final evals.

    options: the fit settings; the default skips the bootstrap (FORECAST_OPTIONS), and
    options.fit_until must be None since `fraction` sets it per run.
    Writes out_dir/extrapolation.csv (and extrapolation.png); returns the ExtrapolationCheck.
    """
    out = Path(out_dir)
    points = _load(path, axis)
    check = extrapolation_check(points, fraction, options, n_final=n_final) if not points.empty else None
    if check is None:
        io.write_csv(pd.DataFrame(columns=["run", "fraction", "pred_final", "obs_final", "abs_error"]),
                     out / "extrapolation.csv")
        if not quiet:
            print(f"no runs found in {path}")
        return None
    io.write_csv(check.per_run, out / "extrapolation.csv")
    if plots != "none":
        io.save_figure(draw.plot_extrapolation(check.per_run, check.aggregate), out / "extrapolation.png")
    if not quiet:
        print(check.report())
    return check
