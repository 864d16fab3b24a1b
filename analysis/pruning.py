"""An Optuna pruner that follows the sigmoid fit of each trial's curve (analysis.stopping).

Optuna's own pruners (median, percentile, ASHA/Hyperband) compare raw intermediate values at
equal steps.  On sigmoid curves that is wrong before the bend: an arm with a late C_mid and
a high A looks worst exactly when they cut (arXiv 2510.13786 §5: larger batches start slower
and reach a higher A).  `SigmoidPruner` fits every trial's curve (running, complete and
pruned alike) and prunes a trial only by `analysis.stopping.decide`: identified, past the
bend, and provably below the leader at the chosen confidence.

Each trial reports its held-out reward with `trial.report(reward, step)`, the step-0 eval
included (it is R0 of the fit), and the compute of each step as the user attribute
`COMPUTE_ATTR` ({str(step): compute}); `report_eval` does both.
"""
from __future__ import annotations

import numpy as np
import optuna
from optuna.trial import TrialState

from analysis.fit import fit_sigmoid
from analysis.runs import run_seed
from analysis.stopping import Decision, StopRule, decide

COMPUTE_ATTR = "compute"


def report_eval(trial, step: int, compute: float, reward: float) -> None:
    """Report one eval to an Optuna trial: the reward as its intermediate value, the compute beside it."""
    computes = dict(trial.user_attrs.get(COMPUTE_ATTR, {})) if hasattr(trial, "user_attrs") else {}
    computes[str(int(step))] = float(compute)
    trial.set_user_attr(COMPUTE_ATTR, computes)
    trial.report(float(reward), int(step))


def trial_curve(trial) -> tuple[np.ndarray, np.ndarray]:
    """(compute, reward) of a (frozen) trial, from its intermediate values and compute attribute."""
    computes = trial.user_attrs.get(COMPUTE_ATTR, {})
    steps = sorted(s for s in trial.intermediate_values if str(s) in computes)
    return (np.array([computes[str(s)] for s in steps], dtype=float),
            np.array([trial.intermediate_values[s] for s in steps], dtype=float))


class SigmoidPruner(optuna.pruners.BasePruner):
    """Prune a trial that cannot catch the leading trial's fitted A (or reward at C*)."""

    def __init__(self, rule: StopRule = StopRule()):
        self.rule = rule
        self.decisions: dict[int, Decision] = {}    # the last decision per trial number
        self._fits: dict[tuple[int, int], object] = {}

    def _fit(self, number: int, compute: np.ndarray, reward: np.ndarray):
        key = (number, compute.size)
        if key not in self._fits:
            self._fits[key] = fit_sigmoid(compute, reward, self.rule.fit_options(run_seed(number, 0)))
        return self._fits[key]

    def prune(self, study, trial) -> bool:
        if len(study.directions) > 1:
            return False        # Optuna has no pruning for multi-objective studies
        arms = {}
        states = (TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)
        for other in study.get_trials(deepcopy=False, states=states):
            compute, reward = trial_curve(other)
            if compute.size >= self.rule.min_points:
                arms[other.number] = [self._fit(other.number, compute, reward)]
        if trial.number not in arms:
            return False
        decision = decide(arms, self.rule)[trial.number]
        self.decisions[trial.number] = decision
        return decision.stop
