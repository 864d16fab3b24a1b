"""Judge early stopping and pruning on simulated sweeps, without CPU-hours of training.

Each simulated sweep draws `n_arms` distinct rows of the paper's Table 1 (arXiv 2510.13786
§4), jitters them as `analysis.synthetic` does (C_mid and B x U(0.8, 1.25), A + U(-0.02, 0.02)),
gives them one R0 (one base model) and one compute budget, and replays their curves eval by
eval with binomial eval noise (the paper's 1,000 prompts x 16 samples) plus, optionally, a
Gaussian `wobble` for the policy drift real runs show between evals.  The truth is known, so
every strategy can be scored on the same sweeps:

    none         no stopping: the baseline (saves nothing, never stops the best arm)
    early_stop   all arms run side by side; at each eval every live arm is fitted and
                 analysis.stopping.decide stops the ones that cannot catch the leader
                 (what `hydra.sweeper.early_stop=true` does)
    sigmoid      an Optuna study, trials one after another, pruned by SigmoidPruner
    median       the same study pruned by Optuna's MedianPruner, for comparison

Scores per strategy: the compute saved (1 - used / full, summed over arms), how often the
true best arm (highest true A, or true reward at C*) was stopped, and how often the arm the
strategy would crown (its best surviving fit, or Optuna's best trial) is the true best.

    results = run_simulation(SimSettings(n_sweeps=200), StopRule())
    print(format_results(results))
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.fit import fit_sigmoid
from analysis.models import sigmoid
from analysis.runs import run_seed
from analysis.stopping import StopRule, decide
from analysis.synthetic import EVAL_SAMPLES, TABLE1

STRATEGIES = ("none", "early_stop", "sigmoid", "median")


@dataclass(frozen=True)
class SimSettings:
    n_sweeps: int = 200
    n_arms: int = 4
    n_evals: int = 40
    """Evals per arm after step 0, evenly spaced in compute."""
    budget: tuple = (12000.0, 24000.0)
    """The sweep's compute budget in GPU-h, drawn per sweep (the paper's ablations ran 16k)."""
    samples: int = EVAL_SAMPLES
    """Eval samples per point: binomial noise (1,000 prompts x 16, paper §2)."""
    wobble: float = 0.0
    """Extra Gaussian sd per eval: policy drift between evals that binomial noise misses."""
    median_startup: int = 1
    """MedianPruner's n_startup_trials (Optuna's default of 5 would never prune a 4-arm sweep)."""
    median_warmup: int = 0
    """MedianPruner's n_warmup_steps (in evals)."""
    seed: int = 0


@dataclass
class SimArm:
    name: str
    A: float
    B: float
    C_mid: float
    R0: float
    compute: np.ndarray
    reward: np.ndarray

    def truth(self, compute):
        return float(sigmoid(compute, self.A, self.B, self.C_mid, self.R0))


@dataclass
class SimSweep:
    arms: list[SimArm]
    budget: float
    fits: dict = field(default_factory=dict)      # (arm index, n points) -> FitResult, shared by strategies


def simulate_sweep(rng: np.random.Generator, settings: SimSettings) -> SimSweep:
    rows = list(TABLE1.items())
    pick = rng.choice(len(rows), size=min(settings.n_arms, len(rows)), replace=False)
    budget = float(rng.uniform(*settings.budget))
    R0 = float(rng.uniform(0.25, 0.40))
    compute = np.concatenate([[0.0], np.linspace(budget / settings.n_evals, budget, settings.n_evals)])
    arms = []
    for i in pick:
        name, (C_mid, B, A) = rows[i]
        C_mid, B, A = C_mid * rng.uniform(0.8, 1.25), B * rng.uniform(0.8, 1.25), A + rng.uniform(-0.02, 0.02)
        truth = sigmoid(compute, A, B, C_mid, R0)
        reward = rng.binomial(settings.samples, truth) / settings.samples
        if settings.wobble:
            reward = np.clip(reward + rng.normal(0.0, settings.wobble, reward.size), 0.0, 1.0)
        arms.append(SimArm(name, float(A), float(B), float(C_mid), R0, compute, reward))
    return SimSweep(arms, budget)


def _fit(sweep: SimSweep, i: int, k: int, rule: StopRule):
    """The fit of arm i on its first k evals (step 0 included), cached per sweep."""
    if (i, k) not in sweep.fits:
        arm = sweep.arms[i]
        sweep.fits[(i, k)] = fit_sigmoid(arm.compute[:k], arm.reward[:k], rule.fit_options(run_seed(i, k)))
    return sweep.fits[(i, k)]


def _value(fit, rule: StopRule) -> float:
    """What a finished (or stopped) arm is ranked by: its fitted A, or reward at C*."""
    if not fit.fitted:
        return -np.inf
    return float(fit.A if rule.target_compute is None else fit.predict(rule.target_compute))


def true_best(sweep: SimSweep, rule: StopRule) -> int:
    scores = [a.A if rule.target_compute is None else a.truth(rule.target_compute) for a in sweep.arms]
    return int(np.argmax(scores))


def run_early_stop(sweep: SimSweep, rule: StopRule) -> np.ndarray:
    """Evals each arm got (step 0 included) when every live arm is decided at every eval."""
    n = sweep.arms[0].compute.size
    used = np.full(len(sweep.arms), n)
    live = set(range(len(sweep.arms)))
    for k in range(rule.min_points, n):          # after the last eval nothing is left to save
        fits = {i: [_fit(sweep, i, k if i in live else used[i], rule)] for i in range(len(sweep.arms))}
        for i, d in decide(fits, rule).items():
            if i in live and d.stop:
                used[i] = k
                live.discard(i)
    return used


def run_optuna(sweep: SimSweep, rule: StopRule, pruner, order: np.ndarray) -> tuple[np.ndarray, int]:
    """Trials one after another (in `order`), pruned by `pruner`; (evals used, crowned arm)."""
    import optuna

    from analysis.pruning import SigmoidPruner, report_eval

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed=0))
    n = sweep.arms[0].compute.size
    used = np.full(len(sweep.arms), n)
    if isinstance(pruner, SigmoidPruner):        # same data, same fits: share the sweep's cache
        for (i, k), fit in sweep.fits.items():
            pruner._fits[(int(np.flatnonzero(order == i)[0]), k)] = fit
    for i in order:
        arm = sweep.arms[i]
        trial = study.ask()
        pruned = False
        for k in range(n):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                report_eval(trial, k, arm.compute[k], arm.reward[k])
            if k + 1 < n and trial.should_prune():
                used[i], pruned = k + 1, True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, _value(_fit(sweep, i, n, rule), rule))
    if isinstance(pruner, SigmoidPruner):
        for (number, k), fit in pruner._fits.items():
            sweep.fits.setdefault((int(order[number]), k), fit)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    crowned = int(order[max(done, key=lambda t: t.value).number]) if done else -1
    return used, crowned


def score(sweep: SimSweep, rule: StopRule, used: np.ndarray, crowned: int) -> dict:
    n = sweep.arms[0].compute.size
    full = sum(a.compute[-1] for a in sweep.arms)
    spent = sum(a.compute[u - 1] for a, u in zip(sweep.arms, used))
    best = true_best(sweep, rule)
    stopped = used < n
    true_scores = np.array([a.A if rule.target_compute is None else a.truth(rule.target_compute)
                            for a in sweep.arms])
    return {"saved": 1.0 - spent / full, "best_stopped": bool(stopped[best]),
            "n_stopped": int(stopped.sum()), "crowned_best": crowned == best,
            "regret": float(true_scores[best] - true_scores[crowned]) if crowned >= 0 else np.nan,
            "near_best_stopped": int(sum(stopped[i] and true_scores[best] - true_scores[i] < 0.02
                                         for i in range(len(sweep.arms)) if i != best))}


def _crown(sweep: SimSweep, rule: StopRule, used: np.ndarray) -> int:
    """The arm the sweep's leaderboard would put first: the best fitted value among full-length arms."""
    n = sweep.arms[0].compute.size
    values = [_value(_fit(sweep, i, n, rule), rule) if used[i] == n else -np.inf for i in range(len(sweep.arms))]
    return int(np.argmax(values)) if np.isfinite(max(values)) else -1


def run_simulation(settings: SimSettings = SimSettings(), rule: StopRule = StopRule(),
                   strategies=STRATEGIES, progress=None) -> pd.DataFrame:
    """One row per (sweep, strategy) with the scores of `score`."""
    import optuna

    from analysis.pruning import SigmoidPruner

    rng = np.random.default_rng(settings.seed)
    rows = []
    for s in range(settings.n_sweeps):
        sweep = simulate_sweep(rng, settings)
        n = sweep.arms[0].compute.size
        order = rng.permutation(len(sweep.arms))
        for strategy in strategies:
            if strategy == "none":
                used = np.full(len(sweep.arms), n)
                crowned = _crown(sweep, rule, used)
            elif strategy == "early_stop":
                used = run_early_stop(sweep, rule)
                crowned = _crown(sweep, rule, used)
            elif strategy == "sigmoid":
                used, crowned = run_optuna(sweep, rule, SigmoidPruner(rule), order)
            elif strategy == "median":
                pruner = optuna.pruners.MedianPruner(n_startup_trials=settings.median_startup,
                                                     n_warmup_steps=settings.median_warmup)
                used, crowned = run_optuna(sweep, rule, pruner, order)
            else:
                raise ValueError(f"unknown strategy {strategy!r}; choose from {STRATEGIES}")
            rows.append({"sweep": s, "strategy": strategy, **score(sweep, rule, used, crowned)})
        if progress is not None:
            progress(s + 1, settings.n_sweeps)
    return pd.DataFrame(rows)


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: mean compute saved, share of sweeps whose true best arm was stopped, ..."""
    g = results.groupby("strategy", sort=False)
    return pd.DataFrame({
        "sweeps": g.size(),
        "compute_saved": g["saved"].mean(),
        "best_stopped": g["best_stopped"].mean(),
        "arms_stopped": g["n_stopped"].mean(),
        "near_best_stopped": g["near_best_stopped"].mean(),
        "crowned_true_best": g["crowned_best"].mean(),
        "mean_regret": g["regret"].mean(),
    }).reset_index()


def format_results(summary: pd.DataFrame) -> str:
    lines = ["strategy     compute saved  true best stopped  arms stopped/sweep  crowned true best  mean regret"]
    for r in summary.itertuples():
        lines.append(f"{r.strategy:<12} {100 * r.compute_saved:12.1f}%  {100 * r.best_stopped:16.1f}%"
                     f"  {r.arms_stopped:18.2f}  {100 * r.crowned_true_best:16.1f}%  {r.mean_regret:11.4f}")
    return "\n".join(lines)
