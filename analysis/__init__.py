"""scalerl's analysis layer: fit the ScaleRL law R(C) to reward-vs-compute curves and rank recipes.

Owns: the sigmoid and power-law models (models), the fits and their statuses (fit,
solver, baseline), uncertainty (uncertainty), the tidy runs table (runs), ranking
(leaderboard), extrapolation checks (extrapolation), the forecast at a budget (budget),
figures (plots), the sweep's HTML report (page: report.html, Plotly charts), every file and
network read or write (io: runs from disk or W&B; points_csv: a points CSV; writing: atomic
results; report), and the CLI (cli, __main__).
Must not know about: torch, the trainer or anything in `scalerl` -- it reads what runs
leave on disk (metrics.jsonl, config.yaml, summary.json) or in W&B, nothing else.
Every fit setting travels as one frozen fit.FitOptions, validated when built.
To add a fitting method: a function in fit.py (its heavy numerics in solver.py) and its
entry in fit.METHODS; FitOptions' check, the CLI's --method choices and the never-raises
property test derive from that dict.
"""
from analysis.baseline import PowerLawFit, fit_power_law
from analysis.extrapolation import ExtrapolationCheck, extrapolation_check
from analysis.fit import METHODS, STATUSES, FitOptions, FitResult, fit_sigmoid, fit_until
from analysis.leaderboard import format_leaderboard, leaderboard
from analysis.models import guess, power_law, sigmoid
from analysis.pipeline import analyze_extrapolation, analyze_sweep
from analysis.runs import fit_runs

__all__ = [
    "ExtrapolationCheck", "FitOptions", "FitResult", "METHODS", "PowerLawFit", "STATUSES",
    "analyze_extrapolation", "analyze_sweep", "extrapolation_check", "fit_power_law", "fit_runs",
    "fit_sigmoid", "fit_until", "format_leaderboard", "guess", "leaderboard", "power_law", "sigmoid",
]
