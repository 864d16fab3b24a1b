"""The one entry point the CLI and `scalerl.sweep` share: read, fit, rank, plot, write.

    board = analyze_sweep("outputs/sweeps/loss", "results/", FitOptions(n_boot=100), quiet=True)

It never raises on a bad curve or a failed run: those become statuses on the leaderboard.
Bad input (no runs at all, a corrupt file, a value out of range) raises io.InputError
before anything is written, so an earlier result is never replaced by an empty one.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from analysis import io, outputs, writing
from analysis import plots as draw
from analysis.extrapolation import extrapolation_check
from analysis.fit import FitOptions
from analysis.leaderboard import MARGIN, format_leaderboard, leaderboard
from analysis.points_csv import read_points
from analysis.runs import axis_columns, curves, fit_runs
from analysis.stopping import with_stop_columns

LEADERBOARD_COLUMNS = ["run", "rank", "status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid",
                       "C_mid_lo", "C_mid_hi", "R0", "n_points", "last_compute"]
FORECAST_OPTIONS = FitOptions()   # the same bootstrap as `fit` and a sweep's end: every forecast has an interval


def _load(source, axis, metrics=(io.REWARD_KEY,), runs=None):
    """The points table of `source` (only the run directories `runs`, if given); InputError if
    it holds no runs (nothing is written then)."""
    points = source.copy() if isinstance(source, pd.DataFrame) else read_points(source, axis=axis, metrics=metrics)
    if runs is not None and not points.empty and "run_dir" in points.columns:
        keep = {str(Path(r).resolve()) for r in runs}
        points = points[points["run_dir"].map(lambda d: str(Path(d).resolve()) in keep)].reset_index(drop=True)
    if points.empty:
        raise io.InputError(f"no runs found in {source}: nothing to fit"
                            + ("" if isinstance(source, pd.DataFrame) else "; any earlier results are left as they were"))
    return points


def analyze_sweep(path, out_dir, options: FitOptions = FitOptions(), *, axis="compute", margin=MARGIN,
                  target_compute=None, plots="all", runs=None, wandb=False, wandb_project="scalerl-analysis",
                  wandb_group=None, wandb_settings=None, quiet=False, metrics=(io.REWARD_KEY,)):
    """Fit every run of a sweep (directory, points CSV or points DataFrame); returns the leaderboard.

    metrics: the metrics.jsonl column(s) to fit (default pass_rate). Several, or a pattern
    such as 'pass_rate/*', fit one curve per metric and run (a mix's per-task curves).
    options: the fit settings (FitOptions); margin, target_compute: the ranking's.
    runs: only these run directories of a sweep directory (the end of a sweep ranks its own
    arms, not whatever else shares the folder); None: every run found.
    Writes out_dir/leaderboard.csv and, unless plots="none", out_dir/overview.png,
    out_dir/params.png, out_dir/report.html (a sweep directory's report, analysis.page) and
    (plots="all") one out_dir/run-<run>.png per run.  Result files
    of a different analysis already there move to out_dir/previous/ first (analysis.outputs).
    wandb=True also logs a summary W&B run (offline unless configured; see report.py);
    wandb_settings: more settings for it (entity, mode, tags, name; quiet, which defaults to `quiet`).
    """
    out = Path(out_dir)
    points = _load(path, axis, tuple(metrics), runs)
    settings = {**asdict(options), "axis": axis, "margin": margin, "target_compute": target_compute, "plots": plots,
                "metrics": list(metrics)}
    outputs.claim(out, "fit", outputs.run_ids(points), settings, quiet=quiet)
    say = (lambda *a: None) if quiet else (lambda text: print(f"[analysis] {text} ({time.time() - t0:.0f}s)", flush=True))
    t0 = time.time()
    say(f"fitting {len(outputs.run_ids(points))} runs ({options.n_boot} bootstrap refits each)")
    fits = fit_runs(points, options)
    board = leaderboard(points, fits, options, margin=margin, target_compute=target_compute)
    board = with_stop_columns(board, io.read_stop_records(points))      # early-stopped runs: why, and the fit then
    written = [writing.write_csv(board, out / "leaderboard.csv")]
    figures = []
    title = Path(str(path)).name if not isinstance(path, pd.DataFrame) else "sweep"
    label = draw.axis_label(path, axis)
    if plots != "none":
        say(f"drawing the plots ({'overview, params and one per run' if plots == 'all' else 'overview and params'})")
        data = curves(points)
        figures.append(writing.save_figure(draw.plot_overview(board, fits, data, title=title, axis_label=label),
                                      out / "overview.png"))
        figures.append(writing.save_figure(draw.plot_params(board, margin=margin, title=title, level=options.level),
                                      out / "params.png"))
        if plots == "all":
            for run, fit in fits.items():
                fig = draw.plot_run(fit, *data[run], title=run, axis_label=label, target_compute=target_compute)
                written.append(writing.save_figure(fig, out / f"run-{writing.safe_name(run)}.png"))
    written += figures
    outputs.record(out, "fit", outputs.run_ids(points), settings, written)
    page = _report(path, out, quiet, fits) if plots != "none" else None
    if not quiet:
        print(format_leaderboard(board, axes=axis_columns(points)))
        n_run = len(written) - len(figures) - 1
        names = ["leaderboard.csv"] + [f.name for f in figures] + ([f"{n_run} run plots (run-*.png)"] if n_run else [])
        print(f"\nwrote {len(written)} files in {out}: {', '.join(names)}")
        if page is not None:
            print(f"report: {page[0]}")
    if wandb:
        from analysis.report import log_report
        source = "dataframe" if isinstance(path, pd.DataFrame) else str(path)
        log_report(board, figures, out_dir=out, project=wandb_project, group=wandb_group or title,
                   config={**settings, "source": source}, page=page, **{"quiet": quiet, **(wandb_settings or {})})
    return board


def _report(path, out, quiet, fits):
    """report.html beside leaderboard.csv (sweep directories only); a failure is reported, never raised:
    the leaderboard matters more than its page."""
    if isinstance(path, pd.DataFrame) or not Path(str(path)).is_dir():
        return None
    try:
        from analysis.page import write_report
        return write_report(path, out, fits=fits, quiet=True)     # (path, content)
    except Exception as err:  # noqa: BLE001
        if not quiet:
            print(f"could not write report.html ({type(err).__name__}: {err}); retry with `python -m analysis report {path}`")
        return None


def analyze_extrapolation(path, out_dir, options: FitOptions = FORECAST_OPTIONS, *, fraction=0.5,
                          axis="compute", n_final=3, plots="all", quiet=False, metrics=(io.REWARD_KEY,)):
    """Fit each run on its first `fraction` of compute, compare with its final evals.

    options: the fit settings; the default is `fit`'s, bootstrap included (FORECAST_OPTIONS),
    so every forecast has an interval; options.fit_until must be None since `fraction`
    sets it per run.
    Writes out_dir/extrapolation.csv (and extrapolation.png); returns the ExtrapolationCheck.
    """
    if not 0.0 < fraction < 1.0:     # 1 would score the fit on the very points it was fitted to
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    if not (isinstance(n_final, int) and n_final >= 1):
        raise ValueError(f"n_final must be an integer >= 1, got {n_final!r}")
    out = Path(out_dir)
    points = _load(path, axis, tuple(metrics))
    settings = {**asdict(options), "axis": axis, "fraction": fraction, "n_final": n_final, "metrics": list(metrics)}
    outputs.claim(out, "extrapolate", outputs.run_ids(points), settings, quiet=quiet)
    check = extrapolation_check(points, fraction, options, n_final=n_final)
    written = [writing.write_csv(check.per_run, out / "extrapolation.csv")]
    if plots != "none":
        written.append(writing.save_figure(draw.plot_extrapolation(check.per_run, check.aggregate), out / "extrapolation.png"))
    outputs.record(out, "extrapolate", outputs.run_ids(points), settings, written)
    if not quiet:
        print(check.report())
    return check
