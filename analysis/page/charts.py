"""The report's interactive charts, as Plotly figures.

Why Plotly: its Python package bundles plotly.js, so one page carries the library inline
(no CDN, no network request; the page opens offline from a shared filesystem), and the
two interactions the report needs are built in: clicking a legend entry toggles an arm
(all its traces share a legendgroup), and an `updatemenus` button swaps every trace's x
array between FLOPs and device-hours.  No hand-written JavaScript or SVG.  The cost is
plotly.js itself, ~4.7 MB, included once per page (docs/outputs.md gives the page sizes).
"""
from __future__ import annotations

import math

import numpy as np

# Qualitative palette (Plotly's D3 set), one colour per arm, in leaderboard order.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
AXES = (("compute", "compute (training FLOPs)"), ("device_hours", "device-hours"))
REACH = 3.0     # the extrapolation is drawn to 3x the largest compute any arm reached


def color(i):
    return PALETTE[i % len(PALETTE)]


def _to_hours(run_data):
    """compute -> device-hours for one run: interpolated inside its evals, proportional beyond."""
    c, d, _ = run_data.series("compute")
    ok = np.isfinite(c) & np.isfinite(d)
    c, d = c[ok], d[ok]
    if c.size == 0:
        return lambda x: np.full(np.shape(x), np.nan)
    rate = d[-1] / c[-1] if c[-1] > 0 else np.nan

    def convert(x):
        x = np.asarray(x, float)
        inside = np.interp(x, c, d)
        return np.where(x > c[-1], x * rate, inside)
    return convert


def _clean(values):
    """A list for the figure's JSON: non-finite values become None (a gap), never NaN."""
    return [float(v) if math.isfinite(float(v)) else None for v in np.asarray(values, float)]


def _xy(go, traces, xs, **kw):
    """Adds a trace and remembers its x arrays per axis (for the x-axis buttons)."""
    traces.append((go.Scatter(x=_clean(xs["compute"]), **kw), xs))


def _axis_buttons(traces, *, rows=1, y=1.0, x=0.0):
    """Buttons that swap every trace's x between FLOPs and device-hours, and every axis title."""
    buttons = []
    for key, label in AXES:
        titles = {("xaxis" if i == 0 else f"xaxis{i + 1}") + ".title.text": label for i in range(rows)}
        buttons.append(dict(label=label.split(" (")[0], method="update",
                            args=[{"x": [_clean(xs[key]) for _, xs in traces]}, titles]))
    return [dict(type="buttons", direction="right", x=x, y=y, xanchor="left" if x < 0.5 else "right", yanchor="bottom",
                 pad=dict(b=6), buttons=buttons, showactive=True, active=0)]


def curves_figure(content):
    """Held-out pass rate against compute: evals, fitted sigmoid, band, fit cut-off, extrapolation."""
    import plotly.graph_objects as go

    traces = []
    top = max((float(np.nanmax(d.series("pass_rate")[0])) for d in content.runs.values()
               if d.series("pass_rate")[0].size), default=1.0)
    for i, (run, data) in enumerate(content.runs.items()):
        col, group = color(i), f"arm{i}"
        to_hours = _to_hours(data)
        c, d, y = data.series("pass_rate")
        _xy(go, traces, {"compute": c, "device_hours": d}, y=_clean(y), mode="markers", name=run,
            legendgroup=group, marker=dict(color=col, size=6), meta={"kind": "observed", "run": run},
            hovertemplate=f"{run}<br>x %{{x:.4g}}<br>pass rate %{{y:.3f}}<extra></extra>")
        fit = data.fit
        if fit is None or not fit.fitted:
            continue
        lo = float(fit.min_compute) if math.isfinite(fit.min_compute) and fit.min_compute > 0 else float(np.nanmin(c[c > 0]))
        end = float(fit.last_compute)
        inside = np.geomspace(max(lo, end * 1e-3), end, 80) if end > 0 else np.empty(0)
        beyond = np.geomspace(end, max(REACH * top, end * 1.01), 40) if end > 0 else np.empty(0)
        band_x = np.concatenate([inside, beyond])
        band_lo, band_hi = fit.band(band_x)
        if np.isfinite(band_lo).any():
            _xy(go, traces, {"compute": band_x, "device_hours": to_hours(band_x)}, y=_clean(band_hi), mode="lines",
                line=dict(width=0), legendgroup=group, showlegend=False, hoverinfo="skip", meta={"kind": "band", "run": run})
            _xy(go, traces, {"compute": band_x, "device_hours": to_hours(band_x)}, y=_clean(band_lo), mode="lines",
                line=dict(width=0), fill="tonexty", fillcolor=_alpha(col, 0.15), legendgroup=group, showlegend=False,
                hoverinfo="skip", meta={"kind": "band", "run": run})
        _xy(go, traces, {"compute": inside, "device_hours": to_hours(inside)}, y=_clean(fit.predict(inside)),
            mode="lines", line=dict(color=col, width=2), legendgroup=group, showlegend=False,
            meta={"kind": "fit", "run": run}, hovertemplate=f"{run} fit<br>%{{y:.3f}}<extra></extra>")
        _xy(go, traces, {"compute": beyond, "device_hours": to_hours(beyond)}, y=_clean(fit.predict(beyond)),
            mode="lines", line=dict(color=col, width=2, dash="dash"), legendgroup=group, showlegend=False,
            meta={"kind": "extrapolation", "run": run}, hovertemplate=f"{run} extrapolated<br>%{{y:.3f}}<extra></extra>")
        cut = np.array([lo, lo])
        _xy(go, traces, {"compute": cut, "device_hours": to_hours(cut)}, y=[0.0, 1.0], mode="lines",
            line=dict(color=col, width=1, dash="dot"), legendgroup=group, showlegend=False,
            meta={"kind": "cutoff", "run": run}, hovertemplate=f"{run}: fit starts here<extra></extra>")
    fig = go.Figure([t for t, _ in traces])
    fig.update_layout(template="plotly_white", height=460, margin=dict(l=50, r=10, t=40, b=40),
                      yaxis=dict(title="held-out pass rate", range=[0, 1]), xaxis=dict(title=AXES[0][1]),
                      legend=dict(title="arm (click to toggle)", orientation="h", y=-0.18), updatemenus=_axis_buttons(traces))
    return fig


def diagnostics_figure(content, cols=3):
    """One panel per diagnostic (rows of `cols`), one line per arm, shared legend and x buttons."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = content.diagnostics
    rows = max(1, math.ceil(len(panels) / cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[label for _, label in panels],
                        horizontal_spacing=0.07, vertical_spacing=0.35 / rows + 0.02)
    traces = []
    for p, (key, _) in enumerate(panels):
        for i, (run, data) in enumerate(content.runs.items()):
            c, d, v = data.series(key)
            if not v.size:
                continue
            before = len(traces)
            _xy(go, traces, {"compute": c, "device_hours": d}, y=_clean(v), mode="lines+markers", name=run,
                legendgroup=f"arm{i}", showlegend=p == 0, line=dict(color=color(i), width=1.5), marker=dict(size=4),
                meta={"kind": key, "run": run}, hovertemplate=f"{run}<br>%{{y:.4g}}<extra></extra>")
            fig.add_trace(traces[before][0], row=p // cols + 1, col=p % cols + 1)
    fig.update_layout(template="plotly_white", height=240 * rows + 60, margin=dict(l=50, r=10, t=90, b=30),
                      showlegend=True, legend=dict(orientation="h", y=1.0 + 75 / (240 * rows)), updatemenus=_axis_buttons(traces, rows=rows * cols, y=1.0 + 40 / (240 * rows), x=1.0))
    fig.update_annotations(font_size=12)
    return fig


def _alpha(hex_color, a):
    r, g, b = (int(hex_color[k:k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r},{g},{b},{a})"
