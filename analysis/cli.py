"""Command line: `python -m analysis fit|extrapolate ...` (also `scalerl-analysis`).

    python -m analysis fit outputs/sweeps/loss --out results/
    python -m analysis fit points.csv --out out --method paper_grid --n-boot 200
    python -m analysis fit sweep/ --out out --fit-until 5e15 --target-compute 2e16 --wandb
    python -m analysis extrapolate sweep/ --fraction 0.5 --out out
    python -m analysis fit outputs/runs --out out --metric 'pass_rate/*'     # one curve per task (task=mix)
    python -m analysis fit sweep/ --out out --metric pass_rate/math --metric pass_rate/code
    python -m analysis plan sweep/ --budget 2e16 --out out   # which arm wins at my budget?
    python -m analysis report sweep/                            # regenerate sweep/report.html

On a SLURM cluster, run it on a CPU node after the sweep's array finishes, e.g.
    srun -c 2 --time 10 python -m analysis fit $SWEEP_DIR --out $SWEEP_DIR/analysis
(2 cores are plenty: 100 runs with a 1,000-sample bootstrap take seconds.)
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from analysis.fit import METHODS, FitOptions
from analysis.io import AXES, InputError
from analysis.leaderboard import MARGIN
from analysis.pipeline import FORECAST_OPTIONS, analyze_extrapolation, analyze_sweep
from analysis.budget import analyze_budget
from analysis.uncertainty import BOOT_BYTES, boot_limit, memory_bytes


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (what is wrong and --help), not the usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(text, *, low=-math.inf, high=math.inf, low_open=False, high_open=False, integer=False):
    """A finite number in [low, high] (or open ends); argparse turns the TypeError into one line."""
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if integer else 'a number'}") from None
    inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    if not (math.isfinite(value) and inside):
        kind = "an integer" if integer else "a finite number"
        where = (f"{'>' if low_open else '>='} {low:g}" if high == math.inf else
                 f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")
        raise argparse.ArgumentTypeError(f"must be {kind} {where}, got {text}")
    return value


def _ranged(**bounds):
    return lambda text: _number(text, **bounds)


# A budget far past any run (the paper's largest, 100k GPU-hours, is ~4e23 FLOPs); 1e300 overflows the plot
MAX_BUDGET = 1e40


def _n_boot(text):
    """Replicates whose bootstrap fits in memory even for the shortest curve a fit accepts."""
    value = _number(text, low=0, integer=True)
    least = FitOptions.min_points
    if value > boot_limit(least):
        raise argparse.ArgumentTypeError(
            f"{value} replicates need about {value * least * BOOT_BYTES / 2**30:.0f} GiB even for a {least}-point"
            f" curve, over half this machine's {memory_bytes() / 2**30:.0f} GiB; give at most {boot_limit(least)}")
    return value


def _min_compute(text):
    """'auto', 'none', '10%' (of each run's compute) or an absolute compute value."""
    lowered = text.strip().lower()
    if lowered == "none":
        return None
    if lowered.endswith("%"):
        _number(lowered[:-1], low=0.0, high=100.0, high_open=True)  # fail here, not once per run
        return lowered
    return lowered if lowered == "auto" else _number(lowered, low=0.0)


def _common(p):
    p.add_argument("path", help="sweep directory (runs hold metrics.jsonl) or tidy points CSV")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--axis", choices=AXES, default="compute",
                   help="x-axis for sweep directories (default: compute, i.e. training FLOPs)")
    p.add_argument("--min-compute", type=_min_compute, default=FitOptions.min_compute, metavar="X",
                   help="fit only points with compute >= X: 'auto' (first epoch, capped at 25%% of "
                        "the run; 10%% without epochs), 'P%%' of each run, an absolute value, or 'none'")
    p.add_argument("--r0", type=_ranged(low=0.0, high=1.0), default=FitOptions.r0, metavar="V",
                   help="fix R0 for every run (default: each run's step-0 eval)")
    p.add_argument("--method", choices=list(METHODS), default=FitOptions.method,
                   help="closed_form (default: closed-form A + 2-D grid + least_squares) or "
                        "paper_grid (the paper's A x C_mid grid with a least-squares B per cell)")
    p.add_argument("--seed", type=int, default=FitOptions.seed, help="bootstrap seed")
    p.add_argument("--plots", choices=("all", "summary", "none"), default="all",
                   help="all: overview, bars, report.html and one PNG per run; summary: no per-run PNGs;"
                        " none: leaderboard.csv only")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.add_argument("--metric", action="append", default=None, metavar="COLUMN",
                   help="metrics.jsonl column to fit (default pass_rate); repeat it, or give a pattern such as "
                        "'pass_rate/*', to fit one curve per column and run, e.g. per task of a task=mix run")


def build_parser():
    parser = Parser(prog="python -m analysis", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    fit = sub.add_parser("fit", help="fit every run, rank them, write leaderboard.csv and PNGs")
    _common(fit)
    fit.add_argument("--fit-until", type=_ranged(low=0.0, low_open=True), default=FitOptions.fit_until, metavar="X",
                     help="fit only compute <= X and predict the rest (adds pred_final, obs_final)")
    fit.add_argument("--n-boot", type=_n_boot, default=FitOptions.n_boot, metavar="N",
                     help="bootstrap replicates (default %(default)s; 0: none)")
    fit.add_argument("--margin", type=_ranged(low=0.0), default=MARGIN,
                     help="values within this tie (A, or predicted reward), as do overlapping intervals;"
                          " a tie on A is listed by B at a common A (paper: 0.02)")
    fit.add_argument("--target-compute", type=_ranged(low=0.0, low_open=True, high=MAX_BUDGET), default=None,
                     metavar="C",
                     help="also rank by predicted reward at compute C (which recipe wins at my budget?)")
    fit.add_argument("--max-a-width", type=float, default=FitOptions.max_a_width,
                     help="an A interval wider than this marks A_unidentified (default %(default)s)")
    fit.add_argument("--wandb", action="store_true", help="log a summary W&B run (offline by default)")
    fit.add_argument("--wandb-project", default="scalerl-analysis")
    fit.add_argument("--wandb-group", default=None, help="default: the sweep directory's name")

    ext = sub.add_parser("extrapolate", help="fit on the first fraction of compute, score the forecast")
    _common(ext)
    ext.add_argument("--fraction", type=_ranged(low=0.0, high=1.0, low_open=True, high_open=True), default=0.5,
                     help="fraction of each run's compute to fit on, in (0, 1): the rest is what it predicts")
    ext.add_argument("--n-final", type=_ranged(low=1, integer=True), default=3,
                     help="observed final reward = mean of the last N evals (N >= 1)")
    ext.add_argument("--n-boot", type=_n_boot, default=FitOptions.n_boot, metavar="N",
                     help="bootstrap replicates behind each forecast's interval (default %(default)s)")

    budget = sub.add_parser("plan", help="predicted reward at a budget, its interval and P(best) per arm")
    _common(budget)
    budget.add_argument("--budget", type=_ranged(low=0.0, low_open=True, high=MAX_BUDGET), required=True,
                      metavar="C",
                      help="the compute budget C (> 0)")
    budget.add_argument("--n-boot", type=_n_boot, default=FitOptions.n_boot, metavar="N",
                      help="bootstrap replicates behind the intervals and P(best) (default %(default)s)")
    rep = sub.add_parser("report", help="write report.html, one self-contained page, from a fitted sweep's files")
    rep.add_argument("path", help="sweep directory (its runs, and leaderboard.csv unless --results)")
    rep.add_argument("--results", default=None, help="directory holding leaderboard.csv (default: the sweep directory)")
    rep.add_argument("--quiet", action="store_true", help="print nothing")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "report":
        from analysis.page import write_report
        try:
            write_report(args.path, args.results, quiet=args.quiet)
        except (InputError, OSError) as err:
            print(f"{parser.prog} report: error: {err}", file=sys.stderr)
            return 2
        return 0
    fields = dict(r0=args.r0, min_compute=args.min_compute, method=args.method, seed=args.seed)
    if args.command in ("plan", "extrapolate"):
        fields.update(n_boot=args.n_boot)
    if args.command == "fit":
        fields.update(fit_until=args.fit_until, n_boot=args.n_boot, max_a_width=args.max_a_width)
    try:        # one FitOptions; a bad value exits here with one line, naming the option
        options = replace(FitOptions() if args.command == "fit" else FORECAST_OPTIONS, **fields)
    except ValueError as err:
        parser.error(str(err))
    common = dict(axis=args.axis, plots=args.plots, quiet=args.quiet, metrics=tuple(args.metric or ["pass_rate"]))
    try:        # bad input files: one line naming the file, exit 2, nothing overwritten
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out} is a file; give a directory for the results")
        if not Path(args.path).exists():
            raise InputError(f"{args.path}: no such sweep directory or points CSV")
        if args.command == "fit":
            analyze_sweep(args.path, out, options, margin=args.margin,
                          target_compute=args.target_compute, wandb=args.wandb,
                          wandb_project=args.wandb_project, wandb_group=args.wandb_group, **common)
        elif args.command == "plan":
            analyze_budget(args.path, out, args.budget, options, **common)
        else:
            analyze_extrapolation(args.path, out, options, fraction=args.fraction,
                                  n_final=args.n_final, **common)
    except BrokenPipeError:     # the reader went away (`| head`): analysis/__main__.py exits quietly
        raise
    except (InputError, OSError) as err:
        print(f"{parser.prog} {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0
