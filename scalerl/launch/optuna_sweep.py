"""``hydra/sweeper=optuna``: an Optuna study whose trials are scalerl arms.

    python -m scalerl.sweep -m hydra/sweeper=optuna 'train.lr=tag(log, interval(1e-5, 1e-3))' \\
        batch=small,default,large hydra.sweeper.n_trials=12

It drives current Optuna directly with ask-and-tell (Hydra's own Optuna sweeper pins
optuna<3) and keeps that plugin's search-space syntax (``scalerl.launch.search_space``).

- Trials: each trial is an arm, a run directory named by its config hash like any other;
  ``n_jobs`` trials at a time go to the configured launcher as one batch (local processes,
  or one SLURM array), so relaunching and failure handling are the sweeper's.
- Objective (``objective``): the fitted A (default), the predicted reward at
  ``target_compute`` (``target``), or A and B together (``A_and_B``, multi-objective),
  from the sigmoid fit of the finished curve (arXiv 2510.13786 §1).  A run whose A is not
  identified is scored by its observed final reward (mean of its last 3 evals) instead;
  ``user_attrs`` record which basis each value has.
- Pruning (``pruner``): ``sigmoid`` (analysis.pruning: the early-stopping rule, never
  before the bend), ``median`` (Optuna's MedianPruner, for comparison) or ``none``.  While a
  batch runs, a watcher reports each new eval to its trial and writes ``stop.json`` into
  the run directory of a trial to prune; the run stops (``stopped_early``) and the trial
  is told PRUNED.  Optuna cannot prune multi-objective studies, so ``A_and_B`` does not.
- Storage: ``sqlite:///<sweep dir>/optuna.db`` by default.  A relaunch of the same command
  continues the study: trials left running are resumed from their checkpoints, finished
  ones are told from their files, and only the missing trials are asked for.
"""
from __future__ import annotations

import sys
import threading
import warnings
from pathlib import Path

from scalerl.config import ConfigError
from scalerl.core.hashing import stable_hash
from scalerl.core.jsonio import JsonlFile
from scalerl.launch import early_stop, rundir
from scalerl.launch.sweep_summary import write_leaderboard
from scalerl.launch.search_space import corners, parse_space, trial_overrides
from scalerl.launch.sweeping import LAUNCH_STATES, invalid_arms, plan_arms, print_table

OBJECTIVES = ("A", "target", "A_and_B")
SAMPLERS = ("tpe", "random", "nsgaii")
PRUNERS = ("sigmoid", "median", "none")
N_FINAL = 3


def check_settings(sweeper) -> None:
    """Every sweeper setting, before anything runs; a bad one names its key."""
    if sweeper.objective not in OBJECTIVES:
        raise ConfigError("hydra.sweeper.objective", f"must be one of {OBJECTIVES}, got {sweeper.objective!r}")
    if sweeper.objective == "target" and not (sweeper.target_compute and float(sweeper.target_compute) > 0):
        raise ConfigError("hydra.sweeper.target_compute", "objective=target needs the compute C* (> 0) to predict at")
    if sweeper.sampler not in SAMPLERS:
        raise ConfigError("hydra.sweeper.sampler", f"must be one of {SAMPLERS}, got {sweeper.sampler!r}")
    if sweeper.pruner not in PRUNERS:
        raise ConfigError("hydra.sweeper.pruner", f"must be one of {PRUNERS}, got {sweeper.pruner!r}")
    for key in ("n_trials", "n_jobs"):
        if not (isinstance(getattr(sweeper, key), int) and getattr(sweeper, key) >= 1):
            raise ConfigError(f"hydra.sweeper.{key}", f"must be an integer >= 1, got {getattr(sweeper, key)!r}")


def make_sampler(sweeper, n_existing: int = 0):
    """The sampler, seeded by ``seed`` plus the trials the study already has: a relaunch must
    not replay the random draws of the first launch."""
    import optuna

    kinds = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
             "nsgaii": optuna.samplers.NSGAIISampler}
    kwargs = dict(sweeper.sampler_kwargs or {})
    if sweeper.sampler == "tpe" and sweeper.n_jobs > 1:
        kwargs.setdefault("constant_liar", True)   # a batch's trials must not all land on one point
    try:
        return kinds[sweeper.sampler](seed=sweeper.seed + n_existing, **kwargs)
    except TypeError as e:
        raise ConfigError("hydra.sweeper.sampler_kwargs", str(e)) from None


def make_pruner(sweeper, rule):
    import optuna

    from analysis.pruning import SigmoidPruner

    if sweeper.pruner == "none" or sweeper.objective == "A_and_B":
        return optuna.pruners.NopPruner()
    if sweeper.pruner == "sigmoid":
        return SigmoidPruner(rule)
    try:
        return optuna.pruners.MedianPruner(**dict(sweeper.pruner_kwargs or {}))
    except TypeError as e:
        raise ConfigError("hydra.sweeper.pruner_kwargs", str(e)) from None


def objective_values(run_dir: Path, sweeper, rule) -> tuple[list[float], dict]:
    """The trial's objective value(s) from its finished curve, and the attributes that explain them."""
    import numpy as np

    from analysis.fit import FitOptions, fit_sigmoid

    curve = early_stop.read_curve(run_dir)
    fit = fit_sigmoid(curve.compute, curve.reward, FitOptions(n_boot=sweeper.n_boot, level=rule.level),
                      epoch=curve.epoch)
    observed = float(np.mean(curve.reward[-N_FINAL:])) if curve.reward else float("nan")
    attrs = {"fit_status": fit.status, "A": fit.A, "A_lo": fit.A_lo, "A_hi": fit.A_hi, "B": fit.B,
             "C_mid": fit.C_mid, "obs_final": observed, "run_dir": str(run_dir)}
    if sweeper.objective == "target" and fit.fitted:
        values, basis = [float(fit.predict(float(sweeper.target_compute)))], "fit"
    elif sweeper.objective != "target" and fit.usable:
        values, basis = ([fit.A] if sweeper.objective == "A" else [fit.A, fit.B]), "fit"
    else:  # no number to trust from the fit: what the run did reach
        values, basis = ([observed] if sweeper.objective != "A_and_B" else [observed, 0.0]), "observed_final"
    attrs["objective_basis"] = basis
    return values, {k: (float(v) if isinstance(v, float) and np.isfinite(v) else v) for k, v in attrs.items()
                    if not (isinstance(v, float) and not np.isfinite(v))}


class TrialWatcher:
    """While a batch runs: report each new eval to its trial and stop the trials to prune."""

    def __init__(self, study, trials: dict, poll_s: float):
        self.study, self.trials, self.poll_s = study, trials, poll_s   # {run_dir: [optuna Trial]}
        stored = {t.number: t for t in study.get_trials(deepcopy=False)}
        self.reported = {d: set(stored[t[0].number].intermediate_values) for d, t in trials.items()}
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scalerl-optuna-pruner", daemon=True)

    def check(self) -> None:
        from analysis.pruning import SigmoidPruner, report_eval

        for run_dir, trials in self.trials.items():
            if early_stop.finished(run_dir):
                continue
            rows = [r for r in JsonlFile(run_dir / "metrics.jsonl").rows() if r.get("pass_rate") is not None]
            new = [r for r in rows if int(r["step"]) not in self.reported[run_dir]]
            if not new:
                continue
            for trial in trials:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")    # a step reported before a resume
                    for r in new:
                        report_eval(trial, int(r["step"]), float(r["compute"]), float(r["pass_rate"]))
            self.reported[run_dir] |= {int(r["step"]) for r in new}
            if len(self.study.directions) == 1 and trials[0].should_prune():
                pruner = self.study.pruner
                decision = pruner.decisions.get(trials[0].number) if isinstance(pruner, SigmoidPruner) else None
                record = decision.record() if decision is not None else {
                    "reason": f"pruned by {type(pruner).__name__} at step {int(new[-1]['step'])}", "basis": "median"}
                early_stop.request_stop(run_dir, {**record, "pruner": type(pruner).__name__,
                                                  "trial": trials[0].number, "step": int(new[-1]["step"]),
                                                  "compute": float(new[-1]["compute"])})
                print(f"[scalerl] optuna: pruning trial {trials[0].number} ({run_dir.name}): {record['reason']}")

    def _loop(self) -> None:
        while not self._halt.wait(self.poll_s):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - never take the sweep down
                print(f"[scalerl] optuna: pruning check failed ({type(e).__name__}: {e}); will retry")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self._thread.join(timeout=60)
        try:
            self.check()    # the last evals of each run, so every trial's curve is complete
        except Exception as e:  # noqa: BLE001 - the runs' results matter more than the report
            print(f"[scalerl] optuna: last pruning check failed ({type(e).__name__}: {e})")


def _open_study(sweeper, space, fixed, loader, *, create=True):
    """(study or None, sweep dir, storage, rule); validates the space's corners first."""
    import optuna

    arms = plan_arms([trial_overrides(c, fixed) for c in corners(space)], sweeper.config, loader)
    bad = [a for a in arms if a.state == "invalid"]
    if bad:
        raise invalid_arms(bad, len(arms), "trials (the search space reaches invalid configs)")
    sweep_dir = arms[0].run_dir.parent
    storage = sweeper.storage or f"sqlite:///{sweep_dir / 'optuna.db'}"
    rule = early_stop.stop_rule(sweeper.stop_rule, sweeper.target_compute if sweeper.objective == "target" else None)
    if not create and not sweeper.storage and not (sweep_dir / "optuna.db").exists():
        return None, sweep_dir, storage, rule
    sweep_dir.mkdir(parents=True, exist_ok=True)
    name = sweeper.study_name or study_name(sweep_dir, space, fixed, sweeper.objective)
    directions = ["maximize", "maximize"] if sweeper.objective == "A_and_B" else ["maximize"]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True, directions=directions,
                                sampler=make_sampler(sweeper), pruner=make_pruner(sweeper, rule))
    if study.trials:
        study.sampler = make_sampler(sweeper, len(study.trials))
    return study, sweep_dir, storage, rule


def study_name(sweep_dir: Path, space: dict, fixed: list[str], objective: str) -> str:
    """``<sweep dir name>-<hash of the search>``: a relaunch of the same command finds its study,
    and a different search in the same sweep directory gets its own (n_trials may grow)."""
    return f"{sweep_dir.name}-{stable_hash([sorted(fixed), {k: repr(d) for k, d in space.items()}, objective])}"


def _tell(study, trials, run_dir, state, sweeper, rule) -> None:
    import optuna

    for trial in trials:
        if state == "done":
            values, attrs = objective_values(run_dir, sweeper, rule)
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            study.tell(trial, values)
        elif state == "stopped_early":
            trial.set_user_attr("run_dir", str(run_dir))
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif state == "failed":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)


def print_trials(study) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"optuna study {study.study_name}: {len(study.trials)} trial(s)")
    for col in ("#", "state", "value", "basis", "params", "run dir"):
        table.add_column(col)
    for t in study.trials:
        value = "-" if t.values is None else ", ".join(f"{v:.4f}" for v in t.values)
        params = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
        table.add_row(str(t.number), t.state.name.lower(), value, str(t.user_attrs.get("objective_basis", "")),
                      params, Path(t.user_attrs.get("run_dir", "")).name)
    Console(width=None if sys.stdout.isatty() else 220).print(table)


def run_optuna_sweep(sweeper, arguments: list[str]) -> list:
    """Ask, launch in batches of n_jobs, prune while they run, tell; continue a stored study."""
    import optuna

    check_settings(sweeper)
    loader = sweeper.hydra_context.config_loader
    space, fixed = parse_space(arguments, sweeper.params)
    if not space:
        raise ConfigError("hydra.sweeper.params", "nothing to search: give interval(...), choice(...) or a,b,c overrides")
    launching = sweeper.action not in ("status", "dry-run")
    study, sweep_dir, storage, rule = _open_study(sweeper, space, fixed, loader, create=launching)
    print("[scalerl] optuna search space: " + ", ".join(f"{k} ~ {d!r}" for k, d in space.items())
          + (f"; fixed: {' '.join(fixed)}" if fixed else ""))
    if study is None:
        print(f"[scalerl] optuna: no study yet in {storage}; every corner of the space is valid")
        return []
    print(f"[scalerl] optuna study {study.study_name!r} in {storage}: {len(study.trials)} of {sweeper.n_trials}"
          f" trial(s) so far; objective {sweeper.objective}, pruner {type(study.pruner).__name__}")
    if not launching:
        print_trials(study)
        return []
    returns, interrupted, seen = [], False, set()
    while not interrupted:
        running = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                   if t.number not in seen]
        batch = {}
        for frozen in running:       # left by an earlier launch: resume (or tell) them first
            seen.add(frozen.number)
            trial = optuna.trial.Trial(study, frozen._trial_id)   # as study.ask does; Optuna has no public reopen
            batch.setdefault(tuple(frozen.user_attrs.get("overrides") or trial_overrides(frozen.params, fixed)),
                             []).append(trial)
        while sum(map(len, batch.values())) < sweeper.n_jobs and len(study.trials) < sweeper.n_trials:
            trial = study.ask(space)
            seen.add(trial.number)
            overrides = trial_overrides(trial.params, fixed)
            trial.set_user_attr("overrides", overrides)
            batch.setdefault(tuple(overrides), []).append(trial)
        if not batch:
            break
        arms = plan_arms([list(o) for o in batch], sweeper.config, loader)
        by_dir = {}
        for arm, trials in zip(arms, batch.values()):
            if arm.state == "invalid":
                print(f"[scalerl] optuna: trial {trials[0].number} is invalid: {arm.error}", file=sys.stderr)
                for t in trials:
                    study.tell(t, state=optuna.trial.TrialState.FAIL)
                continue
            for t in trials:
                t.set_user_attr("run_dir", str(arm.run_dir))
            by_dir.setdefault(arm.run_dir, (arm, []))[1].extend(trials)
        todo = [arm for arm, _ in by_dir.values() if arm.state in LAUNCH_STATES]
        print_table([arm for arm, _ in by_dir.values()], f"optuna batch: {len(by_dir)} arm(s) in {sweep_dir}")
        with TrialWatcher(study, {arm.run_dir: trials for arm, trials in by_dir.values() if arm.state in LAUNCH_STATES},
                          sweeper.poll_s):
            if todo:
                returns += list(sweeper.launcher.launch([a.overrides for a in todo], initial_job_idx=len(study.trials)))
        for arm, trials in by_dir.values():
            state = rundir.arm_state(arm.run_dir)
            if state in ("done", "stopped_early", "failed"):
                _tell(study, trials, arm.run_dir, state, sweeper, rule)
            else:   # interrupted, or running elsewhere: the trial stays RUNNING for the next launch
                interrupted = interrupted or arm in todo
                print(f"[scalerl] optuna: trial(s) {[t.number for t in trials]} left {state}; relaunch to continue")
    print_trials(study)
    _print_best(study)
    if sweeper.leaderboard:
        trial_dirs = sorted({Path(t.user_attrs["run_dir"]) for t in study.trials if t.user_attrs.get("run_dir")})
        write_leaderboard(sweep_dir, trial_dirs, n_boot=sweeper.n_boot)  # this study's trials, not the whole folder
    if interrupted:
        print("[scalerl] optuna: interrupted; relaunch the same command to continue the study")
    return returns


def _print_best(study) -> None:
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not done:
        print("[scalerl] optuna: no trial has completed yet")
        return
    best = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    for t in best:
        print(f"[scalerl] optuna best: trial {t.number} value(s) {[round(v, 4) for v in t.values]}"
              f" ({t.user_attrs.get('objective_basis')}) params {t.params}")
