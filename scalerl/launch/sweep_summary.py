"""End of a sweep: rank this sweep's arms, log the W&B summary run, and tell the user what next.

The fit uses the analysis layer's defaults (``FitOptions``), the same ones as
``python -m analysis fit``, so the intervals at the end of a sweep and from the CLI
agree for the same data. The ranking covers the arms of this sweep only, even when
other runs share its folder.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from scalerl.loggers.wandb_logger import resolve_mode


def sweep_wandb(arm_settings: list[dict | None]) -> dict | None:
    """The summary run's W&B settings: those of the first arm that logs to W&B (None: W&B is off)."""
    settings = next((s for s in arm_settings if s), None)
    if settings is None or resolve_mode(settings["mode"]) == "disabled":
        return None
    return {**settings, "mode": resolve_mode(settings["mode"])}


def sync_hint(sweep_dir: Path, run_dirs: list[Path]) -> str | None:
    """``wandb sync`` for every offline W&B run of this sweep (arms and summary), or None."""
    arms = [d for d in run_dirs if any(Path(d).glob("wandb/offline-run-*"))]
    summary = any(Path(sweep_dir).glob("wandb/offline-run-*"))
    if not arms and not summary:
        return None
    inside = all(Path(d).parent == Path(sweep_dir) for d in arms)
    paths = ([f"{shlex.quote(str(sweep_dir))}/*/wandb/offline-run-*"] if inside and arms else
             [f"{shlex.quote(str(d))}/wandb/offline-run-*" for d in arms])
    if summary:
        paths.append(f"{shlex.quote(str(sweep_dir))}/wandb/offline-run-*")
    return "wandb sync " + " ".join(paths)


def write_leaderboard(sweep_dir: Path, run_dirs: list[Path], n_boot: int | None = None, wandb: dict | None = None):
    """Fit this sweep's runs and write ``leaderboard.csv`` + plots into ``sweep_dir``.

    n_boot: None keeps ``FitOptions``' default (the CLI's). wandb: the summary run's
    project, entity, group and mode (``sweep_wandb``); None when W&B is off.
    Never raises: a sweep's results matter more than its summary table.
    """
    sweep_dir = Path(sweep_dir)
    try:
        # The analysis layer (pandas, scipy, matplotlib: ~2 s to import) loads only at the
        # end of a sweep that ran, never for --dry-run or --status.
        from dataclasses import replace

        from analysis import FitOptions, analyze_sweep

        options = FitOptions() if n_boot is None else replace(FitOptions(), n_boot=n_boot)
        report = dict(wandb=True, wandb_project=wandb["project"], wandb_group=wandb["group"],
                      wandb_settings={"entity": wandb["entity"], "mode": wandb["mode"], "name": "summary",
                                      "tags": ["summary", f"study={wandb['group']}"[:64]],
                                      "quiet": True}) if wandb else {}     # the sync hint is printed below
        board = analyze_sweep(sweep_dir, sweep_dir, options=options, runs=run_dirs, quiet=False, **report)
    except Exception as e:  # noqa: BLE001 - report, keep the runs
        print(f"[scalerl] could not write the leaderboard ({type(e).__name__}: {e}); "
              f"run `python -m analysis fit {shlex.quote(str(sweep_dir))} --out {shlex.quote(str(sweep_dir))}` to retry")
        return None
    print(next_steps(sweep_dir, board, run_dirs))
    return board


def next_steps(sweep_dir: Path, board, run_dirs: list[Path]) -> str:
    """Where the results are, and what to do when the fits cannot pin A down."""
    where = shlex.quote(str(sweep_dir))
    lines = [f"[scalerl] results: {sweep_dir}/leaderboard.csv, overview.png, params.png and run-*.png"
             " (one per run)"]
    if (Path(sweep_dir) / "report.html").is_file():
        lines.append(f"[scalerl] report: {sweep_dir}/report.html (one page: open it in any browser)")
    from analysis.board_text import ranked_units

    units = ranked_units(board) if len(board) else board
    n_unid = int((units["status"] == "A_unidentified").sum()) if len(units) else 0
    if n_unid:
        lines.append(f"[scalerl] {n_unid} of {len(units)} arm(s) are A_unidentified: the curves have not bent toward"
                     " their plateau, so the fit cannot pin down A and ranks by reward at a compute every arm"
                     " reached. To identify A, train longer (a larger train.steps: new runs, since the step"
                     " count is part of the config hash) or add seeds (seed=0,1,2, or 'sweep=[<study>,seeds]')")
    lines.append(f"[scalerl] refit or forecast: python -m analysis fit {where} --out {where}/analysis"
                 f" [--target-compute C]; python -m analysis extrapolate {where} --out {where}/analysis")
    hint = sync_hint(sweep_dir, [Path(d) for d in run_dirs])
    if hint:
        lines.append(f"[scalerl] W&B runs were saved offline; upload them with:\n  {hint}")
    return "\n".join(lines)
