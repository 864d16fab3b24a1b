"""Do the forecast intervals cover what happens?  Half-compute forecasts, scored on coverage.

    python benchmarks/bench_coverage.py                                # synthetic sets (~1 min on 2 cores)
    python benchmarks/bench_coverage.py outputs/sweeps/quick-s0 outputs/sweeps/quick-s1 ...
    python benchmarks/bench_coverage.py --runs 0 outputs/sweeps/*      # real sweeps only

For every run: fit on the first half of its compute (`--fraction`), forecast the mean of its
last 3 evals with the 95% interval of analysis.extrapolation.final_band, and count the runs
whose observed mean lies inside (issue 29: "the 95% half-compute interval covers the observed
final value").  The same count on any sweep directory is the last line of
`python -m analysis extrapolate DIR --out OUT`; this script pools several directories.

Synthetic sets (analysis.synthetic.synthetic_sweep, the hidden curves: paper Table 1 jittered,
R0 in [0.25, 0.40], 80 evals, runs ending at 1.5-4 C_mid, binomial noise at 16,000 samples):
  iid        binomial eval noise only
  wobbly     plus AR(1) policy noise, sd 0.025, lag-1 correlation 0.7 (what real runs show)
Target: coverage >= 90% on each.  Nothing here is a test.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout

from analysis.extrapolation import extrapolation_check  # noqa: E402
from analysis.fit import FitOptions  # noqa: E402
from analysis.io import read_sweep  # noqa: E402
from analysis.synthetic import synthetic_sweep  # noqa: E402

SETS = {"iid": dict(wobble=0.0, rho=0.0), "wobbly": dict(wobble=0.025, rho=0.7)}


def score(per_run):
    """(covered, with an interval, per-status coverage) of an extrapolation table."""
    has = per_run[per_run["covered"].notna()]
    by_status = has.groupby("status")["covered"].agg(lambda c: f"{int(c.sum())}/{c.size}").to_dict()
    return int(has["covered"].astype(bool).sum()), len(has), by_status


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="*", help="sweep directories of real runs to pool")
    ap.add_argument("--runs", type=int, default=200, help="runs per synthetic set (0: none)")
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--n-boot", type=int, default=FitOptions.n_boot)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    options = replace(FitOptions(), n_boot=args.n_boot, seed=args.seed)
    lines = []
    if args.runs:
        for name, noise in SETS.items():
            points = synthetic_sweep(args.runs, 80, seed=args.seed, end=(1.5, 4.0), **noise)
            points = points.drop(columns=[c for c in points.columns if c.startswith("true_")] + ["recipe"])
            hit, n, by_status = score(extrapolation_check(points, args.fraction, options).per_run)
            lines.append(f"synthetic {name:<7} {hit}/{n} covered ({100 * hit / max(n, 1):.1f}%)  by status {by_status}")
    if args.sweeps:
        tables = []
        for sweep in args.sweeps:
            table = extrapolation_check(read_sweep(sweep), args.fraction, options).per_run
            tables.append(table.assign(sweep=sweep))
        table = pd.concat(tables, ignore_index=True)
        hit, n, by_status = score(table)
        for row in table.itertuples():
            band = f"[{row.pred_final_lo:.3f}, {row.pred_final_hi:.3f}]" if np.isfinite(row.pred_final_lo) else "[none]"
            lines.append(f"  {row.sweep}/{row.run}: predicted {row.pred_final:.3f} {band}, observed"
                         f" {row.obs_final:.3f} ({row.status}) {'covered' if row.covered is True else 'MISSED'}")
        lines.append(f"real runs       {hit}/{n} covered ({100 * hit / max(n, 1):.1f}%)  by status {by_status}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
