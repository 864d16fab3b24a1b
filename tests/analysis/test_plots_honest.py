"""Figures that claim only what the fits support (issue 29 point 5)."""
import numpy as np
import pandas as pd

from analysis.extrapolation import extrapolation_check
from analysis.fit import FitOptions, fit_sigmoid
from analysis.models import sigmoid
from analysis.budget import at_budget, plot_budget
from analysis.plots import _draw_curve, axis_label, plot_extrapolation
from analysis.runs import curves, fit_runs
from analysis.synthetic import simulate_curve

C = np.concatenate([[0.0], np.linspace(50.0, 2000.0, 40)])


def unidentified():
    """A run that ends well before its C_mid: A is not identified."""
    return np.clip(sigmoid(C, 0.9, 1.5, 20000.0, 0.2) + np.random.default_rng(0).normal(0, 0.004, C.size), 0, 1)


def test_an_unidentified_fit_is_not_drawn_past_its_data():
    from matplotlib.figure import Figure

    fit = fit_sigmoid(C, unidentified(), FitOptions(n_boot=0))
    assert fit.status == "A_unidentified"
    ax = Figure().add_subplot()
    _draw_curve(ax, fit, 10.0, 1e5, "C0", band=False)
    assert max(line.get_xdata().max() for line in ax.get_lines()) <= fit.last_compute


def test_plan_gives_no_p_best_to_an_untrustworthy_forecast_and_draws_none():
    good = sigmoid(C, 0.6, 2.0, 300.0, 0.2) + np.random.default_rng(1).normal(0, 0.004, C.size)
    points = pd.DataFrame({"run": ["good"] * C.size + ["unid"] * C.size, "compute": np.r_[C, C],
                           "reward": np.r_[np.clip(good, 0, 1), unidentified()]})
    options = FitOptions(n_boot=50)
    fits = fit_runs(points, options)
    table = at_budget(points, 1e4, options, fits=fits).set_index("arm")
    assert np.isnan(table.loc["unid", "p_best"]) and table.loc["good", "p_best"] == 1.0
    fig = plot_budget(table.reset_index(), fits, curves(points), 1e4, level=0.95)
    ax = fig.axes[0]
    unid_lines = [ln for ln in ax.get_lines() if "unid" in str(ln.get_label())]
    assert unid_lines and all(ln.get_xdata().max() <= fits["unid"].last_compute for ln in unid_lines)
    assert ax.get_ylim()[1] <= 1.0


def test_extrapolation_figure_has_error_bars_and_units():
    rng = np.random.default_rng(2)
    frames = []
    for i in range(3):
        c, r, _ = simulate_curve(0.6, 2.0, 2500.0, 0.3, n_points=40, rng=rng)
        frames.append(pd.DataFrame({"run": f"r{i}", "compute": c, "reward": r}))
    check = extrapolation_check(pd.concat(frames), 0.5, FitOptions(n_boot=50))
    ax = plot_extrapolation(check.per_run, check.aggregate).axes[0]
    assert ax.containers, "no error bars"
    assert "pass rate" in ax.get_xlabel()
    assert axis_label("points.csv") == "compute (units of the input's compute column)"
