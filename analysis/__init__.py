"""scalerl's analysis layer: fit the ScaleRL law R(C) to reward-vs-compute curves and rank recipes.

Owns: the sigmoid and power-law models (models), the fits and their statuses (fit,
solver, baseline), uncertainty (uncertainty), the tidy runs table (runs), ranking
(leaderboard), extrapolation checks (extrapolation), figures (plots), every file and
network read or write (io, report), and the CLI (cli, __main__).
Must not know about: torch, the trainer or anything in `scalerl` -- it reads what runs
leave on disk (metrics.jsonl, config.yaml, summary.json) or in W&B, nothing else.
To add a fitting method: a function in solver.py, its name in fit.METHODS and a branch
in fit_sigmoid; the method-agreement test then covers it.
"""
from analysis.baseline import PowerLawFit, fit_power_law
from analysis.extrapolation import ExtrapolationCheck, extrapolation_check
from analysis.fit import STATUSES, FitResult, fit_sigmoid, fit_until
from analysis.leaderboard import format_leaderboard, leaderboard
from analysis.models import guess, power_law, sigmoid
from analysis.pipeline import analyze_extrapolation, analyze_sweep
from analysis.runs import fit_runs

__all__ = [
    "ExtrapolationCheck", "FitResult", "PowerLawFit", "STATUSES", "analyze_extrapolation",
    "analyze_sweep", "extrapolation_check", "fit_power_law", "fit_runs", "fit_sigmoid",
    "fit_until", "format_leaderboard", "guess", "leaderboard", "power_law", "sigmoid",
]
