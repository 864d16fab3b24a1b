"""Figures for a sweep: one per run, an overview on a log-compute axis, and the fitted
parameters with their intervals.

Every function returns a matplotlib Figure built without pyplot (so no global state and
no GUI backend: Figure renders through Agg); `analysis.writing.save_figure` writes the PNG.
Drawing conventions, shared by all figures:
    filled dots   points the fit used
    hollow grey   points below the compute threshold (paper §1: early points excluded)
    hollow color  points after fit_until, i.e. what the fit had to predict
    dotted line   the fitted curve below the cut-off, where it was not fitted
    solid line    the fitted curve over the fitted window; dashed where it extrapolates
    dash-dot      an unidentified fit (A_unidentified): over its fitted window only, never extrapolated
    shaded band   pointwise bootstrap interval of the curve
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.board_text import ranked_units
from analysis.fit import USABLE, FitOptions

STYLE = {
    "font.size": 10, "axes.titlesize": 11, "axes.titleweight": "bold", "axes.labelsize": 10,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.25, "grid.linewidth": 0.6, "legend.frameon": False, "legend.fontsize": 8.5,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "lines.linewidth": 2.0,
}
GREY, BAD = "#8a8a8a", "#c0392b"
AXIS_LABELS = {"compute": "training compute (FLOPs)", "device_hours": "training compute (device-hours)",
               "tokens": "generated tokens", "wall_s": "wall-clock time (s)"}


def axis_label(source, axis="compute"):
    """The x-axis label with its unit: the trainer's unit for a sweep directory; a points CSV
    or a DataFrame carries no unit, so the label says the values are the input's own."""
    from_dir = isinstance(source, (str, Path)) and Path(source).is_dir()
    return AXIS_LABELS.get(axis, axis) if from_dir else "compute (units of the input's compute column)"


def colors(n):
    """Distinct colours: tab10 up to 10 series, tab20 up to 20, then a viridis sweep."""
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(n)]
    return [matplotlib.colormaps["viridis"](x) for x in np.linspace(0, 0.95, n)]


def _interval(value, lo, hi, fmt=".3f"):
    if not np.isfinite(lo):
        return f"{value:{fmt}}"
    return f"{value:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def compute_span(data, reach=0.0):
    """(x_lo, x_hi) of a log-compute axis over every run's positive compute (and out to
    ``reach``), with a margin of 1.5x on each side; None when no run has a positive point."""
    positive = [C[C > 0] for C, _ in data.values() if np.any(C > 0)]
    if not positive:
        return None
    return min(c.min() for c in positive) / 1.5, max(max(c.max() for c in positive), reach) * 1.5


def _draw_curve(ax, fit, x_lo, x_hi, color, band=True, label=None):
    """Fitted curve: dotted below the cut-off, solid over the window, dashed beyond.

    An unusable fit (A not identified) is drawn thin over its fitted window only: past the
    data it would promise a reward nothing supports, and without a band it would look sure.
    """
    xs = np.geomspace(x_lo, x_hi, 300)
    start, end = fit.min_compute if fit.min_compute > 0 else x_lo, fit.last_compute
    if not fit.usable:
        xs = xs[xs <= end]
    if band and fit.boot.shape[0] > 1 and xs.size:
        lo, hi = fit.band(xs)
        ax.fill_between(xs, lo, hi, color=color, alpha=0.18, linewidth=0)
    y = fit.predict(xs)
    width = 2.0 if fit.usable else 1.2
    for mask, style, lw, lab in ((xs <= start, ":", 1.2, None),
                                 ((xs >= start) & (xs <= end), "-" if fit.usable else "-.", width, label),
                                 (xs >= end, "--", width, None)):
        if mask.any():
            ax.plot(xs[mask], y[mask], style, color=color, linewidth=lw, label=lab)


def plot_run(fit, compute, reward, *, title, axis_label="compute", target_compute=None):
    """One run: its points, fitted curve, bootstrap band, cut-off and extrapolation."""
    C, R = np.asarray(compute, float), np.asarray(reward, float)
    ok = np.isfinite(C) & np.isfinite(R) & (C > 0)
    C, R = C[ok], R[ok]
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(7.2, 4.6), layout="constrained")
        ax = fig.add_subplot()
        color = matplotlib.colormaps["tab10"](0)
        if C.size == 0:
            ax.text(0.5, 0.5, f"no points to plot\nstatus: {fit.status}", ha="center", va="center",
                    transform=ax.transAxes, color=BAD)
            ax.set_title(title)
            return fig
        x_lo, x_hi = C.min() / 1.5, max(C.max(), target_compute or 0) * 1.5
        cut = fit.min_compute if np.isfinite(fit.min_compute) else 0.0
        horizon = fit.fit_until if np.isfinite(fit.fit_until) else np.inf
        below, after = C < cut, C > horizon
        used = ~below & ~after
        ax.scatter(C[below], R[below], s=16, facecolors="none", edgecolors=GREY, label="below cut-off")
        ax.scatter(C[used], R[used], s=14, color=color, alpha=0.8, linewidths=0, label="fitted points")
        if after.any():
            ax.scatter(C[after], R[after], s=16, facecolors="none", edgecolors=color, label="held out")
        if fit.fitted:
            _draw_curve(ax, fit, x_lo, x_hi, color, label="sigmoid fit")
        if np.isfinite(fit.R0):
            ax.axhline(fit.R0, color=GREY, linestyle=":", linewidth=1)
            ax.annotate(f"R0 = {fit.R0:.3f}", (x_lo, fit.R0), xytext=(4, 4), textcoords="offset points",
                        fontsize=8, color=GREY)
        if cut > 0:
            ax.axvline(cut, color=GREY, linestyle="--", linewidth=1)
            ax.annotate("fit cut-off", (cut, 0.02), xycoords=("data", "axes fraction"),
                        xytext=(3, 0), textcoords="offset points", fontsize=8, color=GREY)
        if np.isfinite(horizon):
            ax.axvline(horizon, color="black", linestyle="-.", linewidth=1)
            ax.annotate("fit until", (horizon, 0.02), xycoords=("data", "axes fraction"),
                        xytext=(3, 0), textcoords="offset points", fontsize=8)
        if fit.usable:
            ax.axhline(fit.A, color=color, linestyle="-.", linewidth=1, alpha=0.7)
            if np.isfinite(fit.A_lo):
                ax.axhspan(fit.A_lo, fit.A_hi, color=color, alpha=0.08, linewidth=0)
            text = (f"A = {_interval(fit.A, fit.A_lo, fit.A_hi)}\nB = {_interval(fit.B, fit.B_lo, fit.B_hi, '.2f')}"
                    f"\nC_mid = {_interval(fit.C_mid, fit.C_mid_lo, fit.C_mid_hi, '.3g')}")
        elif fit.fitted:
            text = "A not identified\n" + "\n".join(fit.reasons[:2])
        else:
            text = f"no fit: {fit.status}\n" + "\n".join(fit.reasons[:2])
        ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", fontsize=8.5,
                color="black" if fit.usable else BAD,
                bbox=dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor="#dddddd", alpha=0.9))
        ax.set_xscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_xlabel(axis_label)
        ax.set_ylabel("held-out pass rate")
        top = np.nanmax([R.max(), fit.A_hi if fit.usable else np.nan, fit.A if fit.usable else np.nan])
        bottom = np.nanmin([R.min(), fit.R0])
        span = top - bottom if top > bottom else 0.1 * max(abs(top), 1.0)
        if np.isfinite(span) and np.isfinite(top + 0.3 * span):
            ax.set_ylim(bottom - 0.05 * span, top + 0.3 * span)        # room for the text box
        ax.set_title(f"{title}   [{fit.status}]", color="black" if fit.usable else BAD)
        handles, labels = ax.get_legend_handles_labels()
        if fit.usable:
            handles.append(Line2D([], [], color=color, linestyle="--"))
            labels.append("extrapolation")
        if fit.boot.shape[0] > 1:
            handles.append(Patch(color=color, alpha=0.18, linewidth=0))
            labels.append(f"{100 * fit.level:.0f}% bootstrap band")
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.0, 0.78))   # under the box
    return fig


def _units(board):
    """The ranked entries: arm rows for arms with 2+ seeds, run rows otherwise; best first."""
    return ranked_units(board).sort_values("rank", na_position="last", kind="stable")


def _rank_labels(units):
    """'#1 name', with '#1=' for a rank that tied rows share."""
    ranks = units["rank"].to_numpy(float)
    shared = {r for r in ranks[np.isfinite(ranks)] if (ranks == r).sum() > 1}
    return [f"#{int(r)}{'=' if r in shared else ''} {n}" if np.isfinite(r) else str(n)
            for r, n in zip(ranks, units["run"])]


def plot_overview(board, fits, data, *, title="sweep", axis_label="compute", max_legend=20):
    """All runs on one log-compute axis; colours follow rank, seeds share their arm's colour."""
    units = _units(board)
    palette = dict(zip(units["arm"], colors(len(units))))
    runs = board[board["level"] == "run"]
    with matplotlib.rc_context(STYLE):
        wide = len(units) > 8
        fig = Figure(figsize=(10.5 if wide else 8.0, 5.2), layout="constrained")
        ax = fig.add_subplot()
        span = compute_span(data)
        if span is None:
            ax.text(0.5, 0.5, "no points", ha="center", transform=ax.transAxes)
            return fig
        x_lo, x_hi = span
        for row in runs.itertuples():
            C, R = data[row.run]
            fit, color = fits[row.run], palette[row.arm]
            ax.scatter(C[C > 0], R[C > 0], s=7, color=color, alpha=0.3, linewidths=0)
            if fit.fitted:
                start = fit.min_compute if fit.min_compute > 0 else x_lo
                _draw_curve(ax, fit, max(x_lo, start / 3), x_hi, color, band=False)
        handles, labels = [], []
        for unit, label in zip(units.head(max_legend).itertuples(), _rank_labels(units.head(max_legend))):
            value = f"A={_interval(unit.A, unit.A_lo, unit.A_hi)}" if unit.status in USABLE else unit.status
            handles.append(Line2D([], [], color=palette[unit.arm], linewidth=2))
            labels.append(f"{label}  ({value})")
        if len(units) > max_legend:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(f"... {len(units) - max_legend} more in leaderboard.csv")
        ax.set_xscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_xlabel(axis_label)
        ax.set_ylabel("held-out pass rate")
        ax.set_title(f"{title}: reward vs compute")
        handles += [Line2D([], [], color=GREY, linestyle=":", linewidth=1.2),
                    Line2D([], [], color=GREY, linestyle="-", linewidth=2),
                    Line2D([], [], color=GREY, linestyle="--", linewidth=2),
                    Line2D([], [], color=GREY, linestyle="-.", linewidth=1.2)]
        labels += ["below the fit cut-off (early points, not fitted; paper §1)", "fitted window",
                   "extrapolated (identified fits only)", "A not identified: fitted window only"]
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)   # off the data
    return fig


def _param_panels(units):
    """(column, title, colour) of each panel: A and B, plus R(C_ref) when the board has it."""
    panels = [("A", "A (asymptote)", "#4c72b0"), ("B", "B (efficiency exponent)", "#55a868")]
    if "R_ref" in units.columns and np.isfinite(units["R_ref"].astype(float)).any():
        c_ref = float(units["C_ref"].dropna().iloc[0])
        panels.append(("R_ref", f"reward at C_ref = {c_ref:.3g}", "#8172b2"))
    return panels


def plot_params(board, *, margin=0.02, title="sweep", level=None):
    """Each parameter as a dot with its interval (whiskers), best rank on top.

    Only values that carry an interval are drawn: A_unidentified rows have no A (the row
    says so), and a value without an interval (no bootstrap) is named, not drawn.  Tied
    rows share a rank ("#1="); the A panel shades the tie margin below the best A.
    """
    units = _units(board)
    shown = ["A", "B"] + (["R_ref"] if "R_ref" in units.columns else [])
    units = units[np.isfinite(units[shown].astype(float)).any(axis=1) | (units["status"] == "A_unidentified")]
    panels = _param_panels(units)
    with matplotlib.rc_context(STYLE):
        n = max(len(units), 1)
        fig = Figure(figsize=(4.2 * len(panels) + 1.5, 1.5 + 0.36 * n), layout="constrained")
        axes = fig.subplots(1, len(panels), sharey=True)
        if units.empty:
            axes[0].text(0.5, 0.5, "no fitted runs", ha="center", transform=axes[0].transAxes)
            return fig
        y = np.arange(len(units))[::-1]
        for ax, (col, name, colr) in zip(axes, panels):
            v = units[col].to_numpy(float)
            lo, hi = units[f"{col}_lo"].to_numpy(float), units[f"{col}_hi"].to_numpy(float)
            drawn = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
            ax.errorbar(v[drawn], y[drawn], xerr=[(v - lo)[drawn].clip(min=0), (hi - v)[drawn].clip(min=0)],
                        fmt="o", color=colr, ecolor=colr, elinewidth=1.6, capsize=3, markersize=5)
            for yi, value, status in zip(y[~drawn], v[~drawn], units["status"].to_numpy()[~drawn]):
                why = ("not identified" if col == "A" and status == "A_unidentified"
                       else "no interval" if np.isfinite(value) else "-")
                ax.text(0.02, yi, why, va="center", fontsize=8, color=BAD if why != "-" else GREY,
                        transform=ax.get_yaxis_transform())
            ax.set_title(name)
            ax.set_xlabel(col)
            ax.grid(axis="y", visible=False)
            if not drawn.any():                 # nothing to scale an axis on: say so instead
                ax.set_xticks([])
                ax.set_xlabel(f"{col}: no value with an interval")
            if col == "A" and drawn.any():
                best = v[drawn].max()
                ax.axvspan(best - margin, best, color=colr, alpha=0.12, linewidth=0,
                           label=f"within {margin} of the best (tie margin)")
                ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.08), fontsize=8)
        axes[0].set_yticks(y, _rank_labels(units))
        axes[0].set_ylim(-0.6, len(units) - 0.4)
        fig.suptitle(f"{title}: fitted parameters (dot: estimate, whiskers: {100 * (level or FitOptions.level):.0f}% interval;"
                     " '#k=' marks a shared rank)", fontweight="bold")
    return fig


def plot_extrapolation(per_run, aggregate, *, within=0.02):
    """Predicted vs observed final reward, one dot per run, with the ±within band."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(5.6, 5.4), layout="constrained")
        ax = fig.add_subplot()
        has = per_run[np.isfinite(per_run["pred_final"]) & np.isfinite(per_run["obs_final"])]
        if has.empty:
            ax.text(0.5, 0.5, "no predictions", ha="center", transform=ax.transAxes)
            return fig
        ends = [has[c] for c in ("pred_final", "obs_final", "pred_final_lo", "pred_final_hi") if c in has]
        lo = max(min(float(np.nanmin(e)) for e in ends) - 0.03, 0.0)
        hi = min(max(float(np.nanmax(e)) for e in ends) + 0.03, 1.0)
        grid = np.array([lo, hi])
        ax.fill_between(grid, grid - within, grid + within, color="#4c72b0", alpha=0.12, linewidth=0,
                        label=f"within ±{within}")
        ax.plot(grid, grid, color="black", linewidth=1)
        for status, group in has.groupby("status"):
            color = "#4c72b0" if status in USABLE else BAD
            pred = group["pred_final"].to_numpy(float)
            p_lo = group["pred_final_lo"].to_numpy(float) if "pred_final_lo" in group else np.full(pred.size, np.nan)
            p_hi = group["pred_final_hi"].to_numpy(float) if "pred_final_hi" in group else np.full(pred.size, np.nan)
            bars = np.isfinite(p_lo) & np.isfinite(p_hi)
            if bars.any():      # the forecast's prediction interval (analysis.extrapolation.final_band)
                ax.errorbar(group["obs_final"].to_numpy(float)[bars], pred[bars],
                            yerr=[(pred - p_lo)[bars].clip(min=0), (p_hi - pred)[bars].clip(min=0)],
                            fmt="none", ecolor=color, elinewidth=1, capsize=2, alpha=0.6)
            ax.scatter(group["obs_final"], group["pred_final"], s=22, label=status,
                       color=color, alpha=0.85, linewidths=0, zorder=3)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel(f"observed final pass rate (mean of last {aggregate['n_final']} evals)")
        ax.set_ylabel(f"predicted from first {100 * aggregate['fraction']:.0f}% of compute (bars: 95% interval)")
        cover = (f", interval covers {aggregate['n_covered']}/{aggregate['n_interval']}"
                 if aggregate.get("n_interval") else "")
        ax.set_title(f"extrapolation: {100 * aggregate['frac_within']:.0f}% within ±{within},"
                     f" median error {aggregate['median_abs_error']:.3f}{cover}")
        ax.legend(loc="upper left")
    return fig
