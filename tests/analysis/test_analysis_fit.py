"""fit_sigmoid on exact and noisy curves: parameters, thresholds, R0, statuses, report."""
import numpy as np
import pytest

from analysis import solver
from analysis.fit import PAPER_CMID_GRID, FitOptions, FitResult, fit_sigmoid, fit_until, prepare_curve, resolve_min_compute
from analysis.models import sigmoid

TRUE = dict(A=0.61, B=1.92, C_mid=2542.0, R0=0.30)        # paper Table 1, ScaleRL 768


def exact_curve(n=100, end=4 * 2542.0, **params):
    p = {**TRUE, **params}
    C = np.concatenate([[0.0], np.linspace(end / n, end, n)])
    return C, sigmoid(C, p["A"], p["B"], p["C_mid"], p["R0"])


def test_exact_curve_is_recovered_to_optimizer_precision():
    C, R = exact_curve()
    fit = fit_sigmoid(C, R, FitOptions(n_boot=50))
    assert fit.status == "ok"
    assert fit.A == pytest.approx(0.61, abs=1e-7)
    assert fit.B == pytest.approx(1.92, rel=1e-6)
    assert fit.C_mid == pytest.approx(2542.0, rel=1e-6)
    assert fit.R0 == 0.30 and fit.r0_source == "step-0 eval"
    assert fit.sse < 1e-18


def test_scale_of_compute_does_not_matter():
    C, R = exact_curve()
    gpu_h = fit_sigmoid(C, R, FitOptions(n_boot=0, profile=False))
    flops = fit_sigmoid(C * 3.6e18, R, FitOptions(n_boot=0, profile=False))      # GPU-h -> FLOPs
    assert flops.A == pytest.approx(gpu_h.A, abs=1e-9)
    assert flops.C_mid == pytest.approx(gpu_h.C_mid * 3.6e18, rel=1e-6)


def test_noisy_curve_gives_intervals_around_the_estimate(curve):
    fit = fit_sigmoid(*curve, FitOptions(n_boot=300))
    assert fit.status == "ok"
    assert fit.A_lo < fit.A < fit.A_hi and fit.A_profile_lo < fit.A < fit.A_profile_hi
    assert fit.B_lo < fit.B < fit.B_hi and fit.C_mid_lo < fit.C_mid < fit.C_mid_hi
    assert abs(fit.A - 0.61) < 0.01                       # binomial sd 0.004 per point
    # bootstrap and profile see the same curvature: widths agree within a factor 2
    ratio = (fit.A_hi - fit.A_lo) / (fit.A_profile_hi - fit.A_profile_lo)
    assert 0.5 < ratio < 2.0
    assert fit.boot.shape == (300, 4)


def test_batched_lm_matches_scipy_least_squares_on_replicates(curve):
    C, R = curve
    keep = C >= 0.1 * C.max()
    lx, yc = np.log(C[keep] / C.max()), R[keep] - R[0]
    rng = np.random.default_rng(0)
    Y = yc + rng.normal(0, 0.004, size=(20, yc.size))
    d, b, c, sse = solver.lm_batch(lx, Y, 0.7, np.full(20, 0.6), np.full(20, -1.5))
    for k in range(20):
        ref = solver.polish(lx, Y[k], 0.7, *solver.grid_search(lx, Y[k], 0.7)[:3])
        assert sse[k] == pytest.approx(ref[3], rel=1e-7)
        assert d[k] == pytest.approx(ref[0], abs=1e-5)


def test_a_fixed_refits_b_and_c_mid_only():
    C, R = exact_curve()
    fit = fit_sigmoid(C, R, FitOptions(a_fixed=0.61, n_boot=0))
    assert fit.A == 0.61 and "A_fixed" in fit.flags
    assert fit.B == pytest.approx(1.92, rel=1e-6) and fit.C_mid == pytest.approx(2542.0, rel=1e-6)


def test_paper_grid_recovers_a_curve_that_lies_on_its_grid():
    # last compute 40000 maps the paper's C_mid grid onto itself; 2518.18 = 100 + 6 * 39900 / 99
    C_mid = float(PAPER_CMID_GRID[6])
    C, R = exact_curve(n=80, end=40000.0, C_mid=C_mid)
    fit = fit_sigmoid(C, R, FitOptions(method="paper_grid", n_boot=0, profile=False, min_compute=1500.0))
    assert fit.A == pytest.approx(0.61, abs=1e-12)
    assert fit.C_mid == pytest.approx(C_mid, rel=1e-9)
    assert fit.B == pytest.approx(1.92, rel=1e-5)


def test_resolve_min_compute_rules():
    C = np.arange(1.0, 11.0)                      # last compute 10
    assert resolve_min_compute("auto", C) == pytest.approx(1.0)              # 10% without epochs
    assert resolve_min_compute("auto", C, epoch=C / 2) == pytest.approx(2.0)  # epoch 1 at C = 2
    assert resolve_min_compute("auto", C, epoch=C / 8) == pytest.approx(2.5)  # capped at 25%
    assert resolve_min_compute("30%", C) == pytest.approx(3.0)
    assert resolve_min_compute(4.5, C) == 4.5 and resolve_min_compute("4.5", C) == 4.5
    assert resolve_min_compute(None, C) == 0.0


def test_threshold_and_fit_until_select_points():
    C, R = exact_curve(n=10, end=1000.0)          # 0, 100, ..., 1000
    curve = prepare_curve(C, R, FitOptions(min_compute=300.0, fit_until=800.0))
    np.testing.assert_array_equal(curve.x, [300, 400, 500, 600, 700, 800])
    assert curve.threshold == 300.0


@pytest.mark.parametrize("min_compute, threshold, first", [("auto", 50.0, 100.0), ("30%", 150.0, 200.0)])
def test_a_fit_that_stops_early_resolves_its_threshold_on_what_it_has_seen(min_compute, threshold, first):
    # A forecast at 500 cannot know that the run reaches 1000: "auto" (10% without epochs) and "30%"
    # are of 500, i.e. 50 and 150, so the first evals at or past them are 100 and 200.
    C, R = exact_curve(n=10, end=1000.0)          # 0, 100, ..., 1000
    half = prepare_curve(C, R, FitOptions(min_compute=min_compute, fit_until=500.0))
    assert half.threshold == pytest.approx(threshold)
    np.testing.assert_array_equal(half.x, np.arange(first, 501.0, 100.0))
    # with epochs: epoch 1 first reached at 200, capped at 25% of what the fit saw (125), not of the run (250)
    epoch = C / 200.0
    assert prepare_curve(C, R, FitOptions(fit_until=500.0), epoch=epoch).threshold == pytest.approx(125.0)
    # epoch 1 reached only after the horizon: the fit falls back to 10% of what it saw, as a live run would
    late = C / 700.0
    assert prepare_curve(C, R, FitOptions(fit_until=500.0), epoch=late).threshold == pytest.approx(50.0)


def test_a_missing_eval_after_the_horizon_does_not_flag_the_fit_before_it():
    C, R = exact_curve(n=10, end=1000.0)
    R = R.copy()
    R[8] = np.nan                                  # compute 800, after the horizon
    assert prepare_curve(C, R, FitOptions(fit_until=500.0)).flags == ()
    assert prepare_curve(C, R, FitOptions()).flags == ("nan_dropped",)


def test_r0_sources():
    C, R = exact_curve()
    assert fit_sigmoid(C, R, FitOptions(r0=0.25, n_boot=0)).R0 == 0.25
    no_zero = fit_sigmoid(C[1:], R[1:], FitOptions(n_boot=0))
    assert no_zero.R0 == R[1] and no_zero.r0_source == "first point"
    assert "r0_from_first_point" in no_zero.flags


def test_fit_until_predicts_the_held_out_part():
    C, R = exact_curve()
    fit = fit_until(C, R, 0.5 * C.max(), FitOptions(n_boot=0))
    assert fit.last_compute <= 0.5 * C.max() and fit.fit_until == 0.5 * C.max()
    np.testing.assert_allclose(fit.predict(C[C > 0.5 * C.max()]), R[C > 0.5 * C.max()], atol=1e-6)


def test_run_that_ends_before_c_mid_is_unidentified_and_says_so():
    rng = np.random.default_rng(3)
    C, R = exact_curve(n=60, end=0.5 * 2542.0)
    R = R + rng.normal(0, 0.004, R.size)
    fit = fit_sigmoid(C, R, FitOptions(n_boot=200))
    assert fit.status == "A_unidentified" and not fit.usable and fit.fitted
    assert any("before the fitted C_mid" in r or "bound" in r or "wide" in r for r in fit.reasons)
    report = fit.report()
    assert "A     = not identified" in report
    assert f"A     = {fit.A:.4f}" not in report           # never a confident number


def test_a_running_to_its_upper_bound_is_unidentified():
    C = np.linspace(0, 1000, 50)
    R = 0.1 + 0.0008 * C                                   # straight line: no plateau in sight
    fit = fit_sigmoid(C, R, FitOptions(n_boot=0))
    assert fit.status == "A_unidentified"
    assert any("upper bound" in r or "before the fitted C_mid" in r for r in fit.reasons)


def test_report_lists_parameters_and_intervals(curve):
    fit = fit_sigmoid(*curve, FitOptions(n_boot=100))
    text = fit.report()
    assert f"A     = {fit.A:.4f}  [{fit.A_lo:.4f}, {fit.A_hi:.4f}] 95% bootstrap" in text
    assert "status ok" in text


def test_to_row_has_the_leaderboard_fields(curve):
    row = fit_sigmoid(*curve, FitOptions(n_boot=20)).to_row()
    for key in ("status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi", "C_mid", "C_mid_lo", "C_mid_hi",
                "R0", "n_points", "flags", "reasons"):
        assert key in row
    assert row["n_points"] == 91                          # 100 evals, 9 below 10% of the run


def test_band_is_empty_without_bootstrap_and_brackets_the_curve_with_it(curve):
    assert np.isnan(FitResult(status="flat").band([1.0, 2.0])[0]).all()
    fit = fit_sigmoid(*curve, FitOptions(n_boot=200))
    C = np.array([1000.0, 5000.0])
    lo, hi = fit.band(C)
    assert np.all(lo < fit.predict(C)) and np.all(fit.predict(C) < hi)
