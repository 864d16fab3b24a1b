"""Seeded simulations: recovery and coverage on paper Table 1 values, and method agreement.

Curves: paper Table 1 (C_mid, B, A), R0 = 0.30, evals evenly spaced to 4 C_mid, binomial
eval noise at 1,000 prompts x 16 samples (sd ~0.004), as in analysis.synthetic.
"""
import numpy as np
import pytest

from analysis.fit import FitOptions, fit_sigmoid
from analysis.synthetic import TABLE1, simulate_curve

LEVEL = 0.95


def test_a_is_covered_at_about_its_nominal_rate():
    rng = np.random.default_rng(20251013)
    hits = {"A": [], "B": [], "C_mid": [], "profile": []}
    for rep in range(20):
        for C_mid, B, A in TABLE1.values():
            C, R, _ = simulate_curve(A, B, C_mid, 0.30, n_points=100, rng=rng)
            fit = fit_sigmoid(C, R, FitOptions(n_boot=200, level=LEVEL, seed=rep))
            assert fit.status == "ok", fit.report()
            hits["A"].append(fit.A_lo <= A <= fit.A_hi)
            hits["B"].append(fit.B_lo <= B <= fit.B_hi)
            hits["C_mid"].append(fit.C_mid_lo <= C_mid <= fit.C_mid_hi)
            hits["profile"].append(fit.A_profile_lo <= A <= fit.A_profile_hi)
    coverage = {k: float(np.mean(v)) for k, v in hits.items()}
    # 200 curves: binomial sd of a 95% coverage estimate is 0.015
    assert 0.90 <= coverage["A"] <= 0.99, coverage
    assert 0.88 <= coverage["B"] <= 0.995, coverage
    assert 0.88 <= coverage["C_mid"] <= 0.995, coverage
    # the profile ignores the noise in R0 (one eval), so it runs a little narrow
    assert 0.85 <= coverage["profile"] <= 0.99, coverage


@pytest.fixture(scope="module")
def both_methods():
    """Each Table 1 curve fitted by closed_form and paper_grid (about 0.25 s each for the grid)."""
    rng = np.random.default_rng(1)
    out = []
    for name, (C_mid, B, A) in TABLE1.items():
        C, R, _ = simulate_curve(A, B, C_mid, 0.30, n_points=60, rng=rng)
        fast = fit_sigmoid(C, R, FitOptions(n_boot=0, profile=False))
        grid = fit_sigmoid(C, R, FitOptions(n_boot=0, profile=False, method="paper_grid"))
        out.append((name, A, fast, grid))
    return out


# Both tests on `both_methods` in one xdist group: a module fixture is per worker.
@pytest.mark.xdist_group("both_methods")
def test_default_reaches_an_sse_no_worse_than_paper_grid(both_methods):
    for name, _, fast, grid in both_methods:
        assert fast.sse <= grid.sse * (1 + 1e-12), name


@pytest.mark.xdist_group("both_methods")
def test_methods_agree_on_a_within_0_005(both_methods):
    # paper_grid quantizes A to steps of 0.005, so |dA| is ~0.005 whenever its grid rounds to
    # the neighbouring value; over 40 such curves (4 seeds) we saw one at 0.00502.
    for name, _, fast, grid in both_methods:
        assert abs(fast.A - grid.A) <= 0.005, (name, fast.A, grid.A)

