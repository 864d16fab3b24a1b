"""The ScaleRL law and the power law, checked against values worked out by hand."""
import numpy as np
import pytest

from analysis.models import guess, power_law, power_law_from_sigmoid, sigmoid
from analysis.solver import closed_form_d, grid_search, shape, sse_of


def test_sigmoid_is_halfway_at_c_mid():
    # (C_mid / C)^B = 1, so R = R0 + (A - R0) / 2 = (0.2 + 0.6) / 2
    assert sigmoid(2542.0, A=0.6, B=1.92, C_mid=2542.0, R0=0.2) == 0.4


@pytest.mark.parametrize("C, A, B, C_mid, R0, expected", [
    (200.0, 0.7, 1.0, 100.0, 0.1, 0.1 + 0.6 / 1.5),     # (100/200)^1 = 0.5
    (50.0, 0.5, 2.0, 100.0, 0.0, 0.5 / 5.0),            # (100/50)^2 = 4
    (1000.0, 0.61, 3.0, 100.0, 0.3, 0.3 + 0.31 / 1.001),  # (0.1)^3 = 0.001
])
def test_sigmoid_hand_values(C, A, B, C_mid, R0, expected):
    assert sigmoid(C, A, B, C_mid, R0) == pytest.approx(expected, rel=1e-12)


def test_sigmoid_limits_are_r0_and_a():
    assert sigmoid(0.0, 0.61, 1.92, 2542.0, 0.3) == 0.3
    assert sigmoid(1e30, 0.61, 1.92, 2542.0, 0.3) == pytest.approx(0.61, abs=1e-12)


def test_sigmoid_broadcasts_parameters_against_compute():
    A = np.array([[0.6], [0.7]])                          # (2, 1) against (3,)
    out = sigmoid(np.array([0.0, 100.0, 1e30]), A, 2.0, 100.0, 0.2)
    np.testing.assert_allclose(out, [[0.2, 0.4, 0.6], [0.2, 0.45, 0.7]])


def test_power_law_hand_values():
    assert power_law(4.0, A=0.7, D=0.2, B=0.5) == pytest.approx(0.6)   # 0.7 - 0.2 / 2
    assert power_law(1.0, A=0.7, D=0.2, B=3.0) == pytest.approx(0.5)   # C^B = 1


def test_sigmoid_tends_to_its_power_law_far_past_c_mid():
    # paper §1: D = (A - R0) C_mid^B; at C = 1000 C_mid with B = 2 they differ by ~(A-R0) 1e-12
    A, D, B = power_law_from_sigmoid(0.61, 2.0, 2542.0, 0.3)
    assert D == pytest.approx(0.31 * 2542.0**2)
    C = 1000 * 2542.0
    assert sigmoid(C, 0.61, 2.0, 2542.0, 0.3) == pytest.approx(power_law(C, A, D, B), abs=1e-11)


def test_guess_reads_plausible_starting_values():
    C = np.linspace(250, 10000, 60)
    R = sigmoid(C, 0.61, 1.92, 2542.0, 0.3)
    A, B, C_mid = guess(C, R, 0.3)
    assert 0.3 < A <= 1.0 and A >= R.max()
    assert 0.5 * 1.92 < B < 2 * 1.92
    assert 0.5 * 2542 < C_mid < 2 * 2542


def test_guess_falls_back_without_usable_points():
    assert guess([], [], 0.3) == (pytest.approx(0.4), 1.0, 1.0)
    assert guess([1.0, 2.0, 3.0], [0.3, 0.3, 0.3], 0.3)[1:] == (1.0, 2.0)


def test_closed_form_d_by_hand():
    s, yc = np.array([0.5, 1.0]), np.array([0.1, 0.3])
    # d = (0.5*0.1 + 1*0.3) / (0.25 + 1) = 0.35 / 1.25 = 0.28
    assert closed_form_d(s, yc, dmax=1.0) == pytest.approx(0.28)
    assert closed_form_d(s, yc, dmax=0.2) == pytest.approx(0.2)        # clipped to A <= 1
    assert closed_form_d(s, -yc, dmax=1.0) == 0.0                       # clipped to A >= R0


def test_grid_search_sse_matches_direct_sse():
    lx = np.log(np.linspace(0.1, 1.0, 30))
    yc = 0.3 * shape(np.log(2.0), np.log(0.4), lx)[0] + 0.001 * np.sin(np.arange(30))
    d, b, c, sse = grid_search(lx, yc, dmax=0.7)
    assert sse == pytest.approx(float(sse_of(d, b, c, lx, yc)), rel=1e-9, abs=1e-15)
    d_fixed, b2, c2, sse2 = grid_search(lx, yc, dmax=0.7, d_fixed=[0.3, 0.5])
    assert d_fixed.tolist() == [0.3, 0.5]
    assert sse2[0] == pytest.approx(float(sse_of(0.3, b2[0], c2[0], lx, yc)), rel=1e-9)


def test_docstring_examples_hold():
    import doctest

    import analysis.models
    import analysis.uncertainty
    for module in (analysis.models, analysis.uncertainty):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
