"""Which `min_compute` rule makes the best half-compute forecast, using only what was known then?

    python benchmarks/bench_forecast_threshold.py                         # synthetic sets (~3 min on 2 cores)
    python benchmarks/bench_forecast_threshold.py --runs 0 DIR [DIR ...]  # real sweeps only: one line per DIR

Every run is fitted on its first `--fraction` of compute (the evals up to C, and nothing after:
analysis/fit.py cuts at fit_until before it resolves the threshold), and its point forecast of the
mean of its last 3 evals is compared with what was observed (analysis.extrapolation.final_pair, the
scoring of `python -m analysis extrapolate`). A forecast is good within 0.02 (paper §1's margin).

Rules (each a `--min-compute` value, resolved on the evals seen):
  none, 5%, 10% (= auto without epochs), 20%, 30%, auto (epoch 1, capped at 25% of what was seen)
  run-10% (reference only): 10% of the run's LAST compute, the rule of dfa3c8e, which a live
          forecast cannot use since it does not know where the run will end.

Synthetic sets: analysis.synthetic.synthetic_sweep, paper Table 1's shapes jittered, R0 in
[0.25, 0.40], binomial noise at 16,000 samples; runs ending at 3-6 C_mid ("identifiable") or
1.5-4 C_mid ("short"); 80 evals spaced evenly (the paper's schedule) or 16 evals spaced in log
compute from 1/30 of the run (scalerl's default); "wobbly" adds AR(1) policy noise (sd 0.025,
lag-1 correlation 0.7). Real sweeps: every run directory found under each DIR (analysis.io),
e.g. the studies of docs/findings.md; the output is the count within 0.02 per DIR and rule.
Nothing here is a test.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout

from analysis.extrapolation import WITHIN, final_pair  # noqa: E402
from analysis.fit import FitOptions, fit_sigmoid  # noqa: E402
from analysis.points_csv import read_points  # noqa: E402
from analysis.runs import points_table  # noqa: E402
from analysis.synthetic import synthetic_sweep  # noqa: E402

RULES = ("none", "5%", "10%", "20%", "30%", "auto", "run-10%")
SETS = {
    "even, identifiable": dict(n_points=80, end=(3.0, 6.0)),
    "even, short": dict(n_points=80, end=(1.5, 4.0)),
    "log, identifiable": dict(n_points=16, end=(3.0, 6.0), spacing="log"),
    "log, short": dict(n_points=16, end=(1.5, 4.0), spacing="log"),
    "log, short, wobbly": dict(n_points=16, end=(1.5, 4.0), spacing="log", wobble=0.025, rho=0.7),
}
OPTIONS = FitOptions(n_boot=0, profile=False)      # point forecasts only: the intervals do not move them


def forecast_errors(points, rule, fraction):
    """|predicted - observed| of every run's end (NaN where no usable fit), under one rule."""
    points = points_table(points)
    errors = []
    for _, group in points.groupby("run", sort=False):
        C, R = group["compute"].to_numpy(float), group["reward"].to_numpy(float)
        epoch = group["epoch"].to_numpy(float) if "epoch" in group.columns else None
        last = np.nanmax(C) if np.isfinite(C).any() else np.nan
        if not last > 0:
            continue
        if rule == "run-10%":
            min_compute = 0.1 * last       # the whole run's end: a look at the future, for reference
        else:
            min_compute = None if rule == "none" else rule
        fit = fit_sigmoid(C, R, replace(OPTIONS, min_compute=min_compute, fit_until=fraction * last), epoch=epoch)
        pred, obs = final_pair(fit, C, R)
        errors.append(abs(pred - obs) if fit.usable else np.nan)
    return np.array(errors)


def line(name, points, fraction):
    cells = []
    for rule in RULES:
        err = forecast_errors(points, rule, fraction)
        cells.append(f"{int(np.sum(err <= WITHIN))}/{err.size}")
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sweeps", nargs="*", help="sweep directories (real runs) to score as well")
    parser.add_argument("--runs", type=int, default=100, help="synthetic runs per set (0: none)")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    t0 = time.time()
    print(f"half-compute forecasts within {WITHIN} (count / runs; an unusable fit counts as a miss),"
          f" fraction {args.fraction}")
    print("| set | " + " | ".join(RULES) + " |")
    print("|---|" + "---|" * len(RULES))
    if args.runs:
        for name, kw in SETS.items():
            print(line(name, synthetic_sweep(args.runs, seed=args.seed, **kw), args.fraction), flush=True)
    for sweep in args.sweeps:
        print(line(sweep, read_points(sweep), args.fraction), flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
