"""End-of-sweep leaderboard: the analysis layer's fit, ranked by A then B."""
from __future__ import annotations

from pathlib import Path


def write_leaderboard(sweep_dir: Path, run_dirs: list[Path], n_boot: int = 100):
    """Fit every run under ``sweep_dir`` and write ``leaderboard.csv`` + plots there.

    Never raises: a sweep's results matter more than its summary table.
    """
    try:
        # The analysis layer (pandas, scipy, matplotlib: ~2 s to import) loads only at the
        # end of a sweep that ran, never for --dry-run or --status.
        from analysis import FitOptions, analyze_sweep

        return analyze_sweep(Path(sweep_dir), Path(sweep_dir), options=FitOptions(n_boot=n_boot), quiet=False)
    except Exception as e:  # noqa: BLE001 - report, keep the runs
        print(f"[scalerl] could not write the leaderboard ({type(e).__name__}: {e}); "
              f"run `python -m analysis fit {sweep_dir} --out {sweep_dir}` to retry")
        return None
