"""The paper grid's one-parameter fits, all cells at once, against scipy's curve_fit cell by cell
(the paper's own procedure, §1), on curves where the answer is known."""
import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeWarning, curve_fit
from scipy.special import expit

from analysis import solver


def curve_fit_cell(lx, yc, d, c, b0):
    """log B for one (d, c) cell, fitted the way the paper does (curve_fit, its defaults)."""
    def model(x, b):
        return d * expit(-np.exp(np.clip(b, -20.0, 20.0)) * (c - x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        (b,), _ = curve_fit(model, lx, yc, p0=[b0])
    return b


def a_curve(B=2.0, c=-1.0, d=0.5, n=30, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    lx = np.linspace(-6.0, 0.0, n)
    return lx, d * expit(-B * (c - lx)) + noise * rng.standard_normal(n)


def test_noise_free_curve_gives_back_its_b_in_its_own_cell():
    lx, yc = a_curve(B=2.5, c=-2.0, d=0.4, noise=0.0)
    b = solver.fit_log_b(lx, yc, [0.4], [-2.0], np.log(1.0))
    assert b[0] == pytest.approx(np.log(2.5), abs=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_cell_matches_curve_fit(seed):
    lx, yc = a_curve(seed=seed)
    ds = np.array([0.2, 0.45, 0.5, 0.55, 0.9])
    cs = np.array([-4.0, -1.2, -1.0, -0.5, 1.5])
    d, c = (m.ravel() for m in np.meshgrid(ds, cs, indexing="ij"))
    got = solver.fit_log_b(lx, yc, d, c, np.log(1.3))
    want = np.array([curve_fit_cell(lx, yc, dk, ck, np.log(1.3)) for dk, ck in zip(d, c)])
    sse = lambda b: solver.sse_of(d, b[:, None], c[:, None], lx, yc)  # noqa: E731
    # Same minimum of each cell's SSE (a flat cell's log B may differ where the SSE does not).
    assert np.allclose(sse(got), sse(want), rtol=1e-6, atol=1e-12)
    assert np.all(sse(got) <= sse(want) * (1 + 1e-6) + 1e-12)


def test_the_grid_picks_the_generating_cell():
    lx, yc = a_curve(B=2.0, c=-1.0, d=0.5, noise=0.0)
    r0 = 0.1
    best = solver.paper_grid(lx, yc, r0, [0.3, 0.6, 0.9], [-3.0, -1.0, 1.0], b0=1.0)
    d, b, c, sse = best
    assert (round(d, 12), c) == (0.5, -1.0) and b == pytest.approx(np.log(2.0), abs=1e-6) and sse < 1e-20


def test_no_a_at_or_above_r0_gives_none():
    lx, yc = a_curve()
    assert solver.paper_grid(lx, yc, 0.5, [0.3, 0.4], [-1.0], b0=1.0) is None
