"""Benchmark the ScaleRL fit: speed against the paper's grid, bootstrap cost, extrapolation.

    python benchmarks/bench_fit.py                      # the full run (~2-3 min on 2 cores)
    python benchmarks/bench_fit.py --paper-grid-runs 20 # time paper_grid on 20 runs only

Data: 100 synthetic runs of 200 evals each (analysis.synthetic.synthetic_sweep, seed 0):
paper Table 1 parameters jittered, R0 in [0.25, 0.40], runs ending at 3-6 C_mid, binomial
eval noise at 1,000 prompts x 16 samples.  Targets (from the issue):
  1. closed_form >= 20x faster than paper_grid on the point fit;
  2. the 100 runs with a 1,000-sample bootstrap (plus the profile of A) in < 30 s;
  3. extrapolation from 50% of compute: >= 90% of runs within 0.02 of the observed end.
Timings are single-process wall-clock; nothing here is a test.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout

from analysis.extrapolation import extrapolation_check  # noqa: E402
from analysis.fit import FitOptions, fit_sigmoid  # noqa: E402
from analysis.synthetic import synthetic_sweep  # noqa: E402


def timed_fits(runs, options):
    start = time.perf_counter()
    fits = {name: fit_sigmoid(g["compute"].to_numpy(), g["reward"].to_numpy(), options)
            for name, g in runs}
    return fits, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--paper-grid-runs", type=int, default=None,
                        help="time paper_grid on the first N runs only (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    points = synthetic_sweep(args.runs, args.points, seed=args.seed)
    runs = list(points.groupby("run", sort=False))
    truth = {name: g["true_A"].iloc[0] for name, g in runs}
    print(f"# bench_fit: {args.runs} runs x {args.points} evals, python {platform.python_version()},"
          f" {os.cpu_count()} CPUs, numpy {np.__version__}")

    # ------------------------------------------------------------ 1. point fit speed
    point = FitOptions(n_boot=0, profile=False)
    fast, t_fast = timed_fits(runs, point)
    n_grid = args.paper_grid_runs or len(runs)
    grid, t_grid = timed_fits(runs[:n_grid], replace(point, method="paper_grid"))
    per_fast, per_grid = t_fast / len(runs), t_grid / n_grid
    print("\n## 1. point fit (no bootstrap, no profile)")
    print(f"closed_form: {t_fast:7.2f} s for {len(runs)} runs ({1e3 * per_fast:.1f} ms/run)")
    print(f"paper_grid:  {t_grid:7.2f} s for {n_grid} runs ({1e3 * per_grid:.1f} ms/run)")
    print(f"speed-up closed_form vs paper_grid: {per_grid / per_fast:.0f}x   (target >= 20x)")
    common = list(grid)
    d_a = np.array([fast[r].A - grid[r].A for r in common])
    sse_ok = sum(fast[r].sse <= grid[r].sse * (1 + 1e-12) for r in common)
    err_fast = np.array([abs(fast[r].A - truth[r]) for r in common])
    err_grid = np.array([abs(grid[r].A - truth[r]) for r in common])
    print(f"agreement on A: max |dA| {np.abs(d_a).max():.4f}, {np.mean(np.abs(d_a) <= 0.005):.0%} of runs"
          f" within 0.005 (paper_grid's A step is 0.005)")
    print(f"SSE closed_form <= paper_grid on {sse_ok}/{len(common)} runs")
    print(f"|A - truth|: closed_form mean {err_fast.mean():.4f} (max {err_fast.max():.4f}),"
          f" paper_grid mean {err_grid.mean():.4f} (max {err_grid.max():.4f});"
          f" ratio {err_grid.mean() / err_fast.mean():.2f}x")

    # ------------------------------------------------------------ 2. bootstrap
    full, t_full = timed_fits(runs, FitOptions(n_boot=args.n_boot, profile=True))
    covered = np.mean([full[r].A_lo <= truth[r] <= full[r].A_hi for r in full])
    statuses = {s: sum(f.status == s for f in full.values()) for s in {f.status for f in full.values()}}
    print(f"\n## 2. full fit: {args.n_boot}-sample residual bootstrap + profile likelihood of A")
    print(f"{t_full:.2f} s for {len(runs)} runs ({1e3 * t_full / len(runs):.0f} ms/run)   (target < 30 s)")
    print(f"cost vs point fit: {t_full / t_fast:.1f}x;  95% interval on A covers the truth on"
          f" {covered:.0%} of runs;  statuses {statuses}")

    # ------------------------------------------------------------ 3. extrapolation
    start = time.perf_counter()
    check = extrapolation_check(points, 0.5, point)
    t_ext = time.perf_counter() - start
    print(f"\n## 3. extrapolation, fit on the first 50% of compute ({t_ext:.1f} s)")
    print(check.report())
    print("(target: >= 90% within 0.02)")
    short = synthetic_sweep(args.runs, args.points, seed=args.seed + 1, end=(1.5, 3.0))
    hard = extrapolation_check(short, 0.5, point)
    print("\nharder set, not a target: runs end at 1.5-3 C_mid, so the fit window ends at 0.75-1.5 C_mid")
    print(hard.report())


if __name__ == "__main__":
    main()
