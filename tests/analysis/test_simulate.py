"""The simulator that judges early stopping and pruning on replayed Table-1 curves."""
import numpy as np
import pytest

from analysis.models import sigmoid
from analysis.simulate import (
    SimArm,
    SimSettings,
    SimSweep,
    format_results,
    run_early_stop,
    run_optuna,
    run_simulation,
    score,
    simulate_sweep,
    summarize,
)
from analysis.stopping import StopRule
from analysis.synthetic import TABLE1


def hand_sweep(rng):
    """good (A 0.65), bad (A 0.55), both bending at 2,000 GPU-h; slow (A 0.70, C_mid 40,000): the
    true best, never past its bend in a 16,000 GPU-h budget."""
    compute = np.concatenate([[0.0], np.linspace(400.0, 16000.0, 40)])
    arms = []
    for name, A, B, C_mid in (("good", 0.65, 2.0, 2000.0), ("bad", 0.55, 2.0, 2000.0), ("slow", 0.70, 1.5, 40000.0)):
        reward = rng.binomial(16000, sigmoid(compute, A, B, C_mid, 0.3)) / 16000
        arms.append(SimArm(name, A, B, C_mid, 0.3, compute, reward))
    return SimSweep(arms, 16000.0)


def test_simulated_sweeps_follow_table1_with_binomial_noise():
    settings = SimSettings(n_arms=4, n_evals=30)
    sweep = simulate_sweep(np.random.default_rng(0), settings)
    assert len({a.name for a in sweep.arms}) == 4 and len({a.R0 for a in sweep.arms}) == 1   # one base model
    for arm in sweep.arms:
        C_mid, B, A = TABLE1[arm.name]
        assert 0.8 * C_mid <= arm.C_mid <= 1.25 * C_mid and abs(arm.A - A) <= 0.02
        assert settings.budget[0] <= arm.compute[-1] <= settings.budget[1] and arm.compute.size == 31
        truth = sigmoid(arm.compute, arm.A, arm.B, arm.C_mid, arm.R0)
        assert np.max(np.abs(arm.reward - truth)) < 6 * 0.5 / np.sqrt(16000)     # binomial sd <= 0.004


def test_early_stop_cuts_the_loser_and_never_the_slow_true_best():
    rule = StopRule()
    sweep = hand_sweep(np.random.default_rng(1))
    used = run_early_stop(sweep, rule)
    assert used[0] == 41 and used[2] == 41          # good leads; slow is never past its bend
    assert used[1] < 20                             # bad: stopped before half the budget
    s = score(sweep, rule, used, crowned=0)
    assert not s["best_stopped"] and s["n_stopped"] == 1
    assert s["saved"] == pytest.approx((16000.0 - sweep.arms[1].compute[used[1] - 1]) / 48000.0)


def test_median_pruner_cuts_the_slow_true_best():
    import optuna

    rule = StopRule()
    sweep = hand_sweep(np.random.default_rng(1))
    used, crowned = run_optuna(sweep, rule, optuna.pruners.MedianPruner(n_startup_trials=1), np.array([0, 1, 2]))
    assert used[2] < 41 and crowned == 0
    assert score(sweep, rule, used, crowned)["best_stopped"]


def test_run_simulation_is_deterministic_and_none_saves_nothing():
    settings = SimSettings(n_sweeps=2, n_arms=3, n_evals=20, seed=5)
    a = run_simulation(settings, StopRule(), strategies=("none", "early_stop", "median"))
    b = run_simulation(settings, StopRule(), strategies=("none", "early_stop", "median"))
    assert a.equals(b) and len(a) == 6
    summary = summarize(a).set_index("strategy")
    assert summary.loc["none", "compute_saved"] == 0.0 and summary.loc["none", "best_stopped"] == 0.0
    assert 0.0 <= summary.loc["median", "compute_saved"] < 1.0
    assert "early_stop" in format_results(summarize(a))
