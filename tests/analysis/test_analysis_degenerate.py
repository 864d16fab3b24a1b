"""Bad curves never raise: each returns a result with a clear status (paper §1 identifiability)."""
import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.baseline import fit_power_law
from analysis.fit import METHODS, STATUSES, FitOptions, fit_sigmoid
from analysis.leaderboard import format_leaderboard, leaderboard
from analysis.plots import plot_run
from analysis.synthetic import simulate_curve

C = np.concatenate([[0.0], np.linspace(100, 10000, 60)])


def status_of(compute, reward, **kw):
    fit = fit_sigmoid(compute, reward, FitOptions(n_boot=20, **kw))
    assert fit.status in STATUSES
    return fit


def test_constant_curve_is_flat():
    fit = status_of(C, np.full(C.size, 0.42))
    assert fit.status == "flat" and not np.isfinite(fit.A)


def test_all_zero_curve_is_flat():
    assert status_of(C, np.zeros(C.size)).status == "flat"


def test_pure_noise_around_r0_is_flat():
    rng = np.random.default_rng(0)
    assert status_of(C, 0.3 + rng.normal(0, 0.004, C.size), r0=0.3).status == "flat"


def test_decreasing_curve_is_decreasing():
    fit = status_of(C, np.linspace(0.5, 0.2, C.size))
    assert fit.status == "decreasing" and "below R0" in fit.reasons[0]


def test_three_points_are_too_few():
    fit = status_of([0.0, 1.0, 2.0], [0.3, 0.35, 0.4])
    assert fit.status == "too_few_points"


def test_empty_and_all_nan_curves_are_too_few():
    assert status_of([], []).status == "too_few_points"
    assert status_of([np.nan] * 5, [np.nan] * 5).status == "too_few_points"


def test_nan_points_are_dropped_and_reported():
    compute, reward, _ = simulate_curve(0.61, 1.92, 2542.0, 0.3, n_points=80, rng=1)
    reward[[5, 40, 77]] = np.nan
    compute[60] = np.inf
    fit = status_of(compute, reward)
    assert fit.status == "nan_dropped" and fit.usable
    assert fit.n_dropped == 4 and "nan_dropped" in fit.flags


def test_mismatched_lengths_fail_softly():
    assert status_of([1.0, 2.0], [0.1]).status == "fit_failed"
    assert fit_sigmoid(C, C, epoch=[1.0]).status == "fit_failed"


def test_r0_at_the_ceiling_is_flat():
    assert status_of(C, np.ones(C.size)).status == "flat"


def test_collapse_after_a_peak_is_flagged():
    compute, reward, _ = simulate_curve(0.61, 1.92, 2542.0, 0.3, n_points=100, rng=2)
    reward[-20:] -= np.linspace(0, 0.15, 20)           # the paper's GSPO diverged mid-run
    assert "drop_after_peak" in status_of(compute, reward).flags


def test_degenerate_runs_show_their_status_on_the_leaderboard():
    rows = [("flat", C, np.full(C.size, 0.4)), ("down", C, np.linspace(0.5, 0.2, C.size)),
            ("tiny", C[:3], [0.3, 0.31, 0.32]), ("zeros", C, np.zeros(C.size))]
    points = pd.concat([pd.DataFrame({"run": r, "compute": c, "reward": y}) for r, c, y in rows])
    board = leaderboard(points, options=FitOptions(n_boot=10))
    assert dict(zip(board["run"], board["status"])) == {
        "flat": "flat", "down": "decreasing", "tiny": "too_few_points", "zeros": "flat"}
    assert board["rank"].isna().all()
    text = format_leaderboard(board)
    assert "decreasing" in text and "too_few_points" in text


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                          st.floats(min_value=0, max_value=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(finite_or_not, finite_or_not), max_size=25),
       st.sampled_from(list(METHODS)))
def test_any_curve_returns_a_status_and_never_raises(pairs, method):
    compute = [p[0] for p in pairs]
    reward = [p[1] for p in pairs]
    method = method if len(pairs) < 12 else "closed_form"      # paper_grid is slow
    fit = fit_sigmoid(compute, reward, FitOptions(n_boot=5, method=method))
    assert fit.status in STATUSES
    assert fit.report()                                   # always printable
    assert fit_power_law(compute, reward).status in STATUSES
    plot_run(fit, compute, reward, title="any")           # always drawable


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=40))
def test_any_bounded_reward_sequence_fits_within_bounds(reward):
    compute = np.arange(len(reward), dtype=float)          # step 0 is R0
    fit = fit_sigmoid(compute, reward, FitOptions(n_boot=5))
    assert fit.status in STATUSES
    if fit.fitted:
        assert fit.R0 - 1e-12 <= fit.A <= 1.0 + 1e-12      # A in [R0, 1]
        assert fit.B > 0 and fit.C_mid > 0
