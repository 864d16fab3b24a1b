"""Command line: `python -m analysis fit|extrapolate ...` (also `scalerl-analysis`).

    python -m analysis fit outputs/sweeps/loss --out results/
    python -m analysis fit points.csv --out out --method paper_grid --n-boot 200
    python -m analysis fit sweep/ --out out --fit-until 5e15 --target-compute 2e16 --wandb
    python -m analysis extrapolate sweep/ --fraction 0.5 --out out
    python -m analysis plan sweep/ --budget 2e16 --out out     # which arm wins at my budget?

On a SLURM cluster, run it on a CPU node after the sweep's array finishes, e.g.
    srun -c 2 --time 10 python -m analysis fit $SWEEP_DIR --out $SWEEP_DIR/analysis
(2 cores are plenty: 100 runs with a 1,000-sample bootstrap take seconds.)
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from analysis.fit import METHODS, FitOptions
from analysis.io import AXES
from analysis.leaderboard import MARGIN
from analysis.pipeline import FORECAST_OPTIONS, analyze_extrapolation, analyze_sweep
from analysis.plan import analyze_plan


def _min_compute(text):
    """'auto', 'none', '10%' (of each run's compute) or an absolute compute value."""
    lowered = text.strip().lower()
    if lowered == "none":
        return None
    if lowered.endswith("%"):
        float(lowered[:-1])            # fail here, with argparse's message, not once per run
        return lowered
    return lowered if lowered == "auto" else float(lowered)


def _common(p):
    p.add_argument("path", help="sweep directory (runs hold metrics.jsonl) or tidy points CSV")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--axis", choices=AXES, default="compute",
                   help="x-axis for sweep directories (default: compute, i.e. training FLOPs)")
    p.add_argument("--min-compute", type=_min_compute, default=FitOptions.min_compute, metavar="X",
                   help="fit only points with compute >= X: 'auto' (first epoch, capped at 25%% of "
                        "the run; 10%% without epochs), 'P%%' of each run, an absolute value, or 'none'")
    p.add_argument("--r0", type=float, default=FitOptions.r0, metavar="V",
                   help="fix R0 for every run (default: each run's step-0 eval)")
    p.add_argument("--method", choices=list(METHODS), default=FitOptions.method,
                   help="closed_form (default: closed-form A + 2-D grid + least_squares) or "
                        "paper_grid (the paper's A x C_mid grid with curve_fit for B; slow)")
    p.add_argument("--seed", type=int, default=FitOptions.seed, help="bootstrap seed")
    p.add_argument("--plots", choices=("all", "summary", "none"), default="all",
                   help="all: overview, bars and one PNG per run; summary: no per-run PNGs")
    p.add_argument("--quiet", action="store_true", help="print nothing")


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit every run, rank them, write leaderboard.csv and PNGs")
    _common(fit)
    fit.add_argument("--fit-until", type=float, default=FitOptions.fit_until, metavar="X",
                     help="fit only compute <= X and predict the rest (adds pred_final, obs_final)")
    fit.add_argument("--n-boot", type=int, default=FitOptions.n_boot, metavar="N",
                     help="bootstrap replicates (default %(default)s; 0: none)")
    fit.add_argument("--margin", type=float, default=MARGIN,
                     help="A values within this are tied and ordered by B at a common A (paper: 0.02)")
    fit.add_argument("--target-compute", type=float, default=None, metavar="C",
                     help="also rank by predicted reward at compute C (which recipe wins at my budget?)")
    fit.add_argument("--max-a-width", type=float, default=FitOptions.max_a_width,
                     help="an A interval wider than this marks A_unidentified (default %(default)s)")
    fit.add_argument("--wandb", action="store_true", help="log a summary W&B run (offline by default)")
    fit.add_argument("--wandb-project", default="scalerl-analysis")
    fit.add_argument("--wandb-group", default=None, help="default: the sweep directory's name")

    ext = sub.add_parser("extrapolate", help="fit on the first fraction of compute, score the forecast")
    _common(ext)
    ext.add_argument("--fraction", type=float, default=0.5, help="fraction of each run's compute to fit on")
    ext.add_argument("--n-final", type=int, default=3, help="observed final reward = mean of the last N evals")

    plan = sub.add_parser("plan", help="predicted reward at a budget, its interval and P(best) per arm")
    _common(plan)
    plan.add_argument("--budget", type=float, required=True, metavar="C", help="the compute budget C")
    plan.add_argument("--n-boot", type=int, default=FitOptions.n_boot, metavar="N",
                      help="bootstrap replicates behind the intervals and P(best) (default %(default)s)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    fields = dict(r0=args.r0, min_compute=args.min_compute, method=args.method, seed=args.seed)
    if args.command == "plan":
        fields.update(n_boot=args.n_boot)
    if args.command == "fit":
        fields.update(fit_until=args.fit_until, n_boot=args.n_boot, max_a_width=args.max_a_width)
    try:        # one FitOptions; a bad value exits here with the usage line, naming the option
        options = replace(FitOptions() if args.command == "fit" else FORECAST_OPTIONS, **fields)
    except ValueError as err:
        parser.error(str(err))
    common = dict(axis=args.axis, plots=args.plots, quiet=args.quiet)
    if args.command == "fit":
        analyze_sweep(args.path, args.out, options, margin=args.margin,
                      target_compute=args.target_compute, wandb=args.wandb,
                      wandb_project=args.wandb_project, wandb_group=args.wandb_group, **common)
    elif args.command == "plan":
        if not args.budget > 0:
            parser.error(f"--budget must be a compute > 0, got {args.budget}")
        analyze_plan(args.path, args.out, args.budget, options, **common)
    else:
        analyze_extrapolation(args.path, args.out, options, fraction=args.fraction,
                              n_final=args.n_final, **common)
    return 0
