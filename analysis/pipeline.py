"""The one entry point the CLI and `scalerl.sweep` share: read, fit, rank, plot, write.

    board = analyze_sweep("multirun/2025-10-01/12-00-00", "multirun/.../analysis",
                          n_boot=100, quiet=True)

It never raises on a bad curve or a failed run: those become statuses on the leaderboard.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import io
from analysis import plots as draw
from analysis.extrapolation import extrapolation_check
from analysis.fit import METHODS
from analysis.leaderboard import MARGIN, format_leaderboard, leaderboard
from analysis.runs import axis_columns, curves, fit_runs

LEADERBOARD_COLUMNS = ["run", "rank", "status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid",
                       "C_mid_lo", "C_mid_hi", "R0", "n_points", "last_compute"]
AXIS_LABELS = {"compute": "training compute (FLOPs)", "device_hours": "device-hours",
               "tokens": "generated tokens"}


def _load(source, axis):
    return source.copy() if isinstance(source, pd.DataFrame) else io.read_points(source, axis=axis)


def _fit_options(r0, min_compute, fit_until, method, n_boot, level, max_a_width, seed):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return dict(r0=r0, min_compute=min_compute, fit_until=fit_until, method=method,
                n_boot=n_boot, level=level, max_a_width=max_a_width, seed=seed)


def analyze_sweep(path, out_dir, *, axis="compute", min_compute="auto", fit_until=None, r0=None,
                  method="closed_form", n_boot=500, level=0.95, max_a_width=0.1, margin=MARGIN,
                  target_compute=None, plots="all", wandb=False, wandb_project="scalerl-analysis",
                  wandb_group=None, quiet=False, seed=0):
    """Fit every run of a sweep (directory, points CSV or points DataFrame); returns the leaderboard.

    Writes out_dir/leaderboard.csv and, unless plots="none", out_dir/overview.png,
    out_dir/params.png and (plots="all") one out_dir/run-<run>.png per run.
    wandb=True also logs a summary W&B run (offline unless configured; see report.py).
    """
    out = Path(out_dir)
    points = _load(path, axis)
    options = _fit_options(r0, min_compute, fit_until, method, n_boot, level, max_a_width, seed)
    if points.empty:
        board = pd.DataFrame(columns=LEADERBOARD_COLUMNS)
        io.write_csv(board, out / "leaderboard.csv")
        if not quiet:
            print(f"no runs found in {path}")
        return board
    fits = fit_runs(points, **options)
    board = leaderboard(points, fits, margin=margin, target_compute=target_compute, **options)
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
        log_report(board, figures, out_dir=out, project=wandb_project, group=wandb_group or title,
                   config={**options, "source": str(path) if not isinstance(path, pd.DataFrame) else "dataframe",
                           "axis": axis, "margin": margin, "target_compute": target_compute},
                   quiet=quiet)
    return board


def analyze_extrapolation(path, out_dir, *, fraction=0.5, axis="compute", n_final=3, min_compute="auto",
                          r0=None, method="closed_form", n_boot=0, level=0.95, max_a_width=0.1,
                          plots="all", quiet=False, seed=0):
    """Fit each run on its first `fraction` of compute, compare with its final evals.

    Writes out_dir/extrapolation.csv (and extrapolation.png); returns the ExtrapolationCheck.
    """
    out = Path(out_dir)
    points = _load(path, axis)
    options = _fit_options(r0, min_compute, None, method, n_boot, level, max_a_width, seed)
    options.pop("fit_until")
    check = extrapolation_check(points, fraction, n_final=n_final, **options) if not points.empty else None
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
