"""Which arm wins at my budget?  `python -m analysis plan PATH --budget C`.

For each arm (a run, or the seeds of one recipe together) the fitted sigmoid (arXiv
2510.13786 §1) is evaluated at the budget C: the predicted reward, its bootstrap interval,
and the probability that the arm is the best there.  That probability is read off the
bootstrap: replicate i of every arm is one joint draw (arms are fitted independently), the
best arm of each draw gets a vote, and an arm's share of the votes is its probability.  An
arm with several seeds averages its seeds' replicate i, so the probability reflects eval
noise; seeds are what let it see training randomness too (see analysis/README.md).

    table = at_budget(points, budget=2e16)              # pure: points in, one row per arm out
    analyze_budget("outputs/sweeps/loss", "out/", budget=2e16)   # + plan.csv, plan.png, printed

The figure draws every arm's points, its fitted curve out to the budget (dashed past its
data) with the bootstrap band, and the predicted reward at the budget.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import io, outputs, writing
from analysis.fit import FitOptions
from analysis.models import sigmoid
from analysis.plots import STYLE, axis_label, colors, compute_span
from analysis.points_csv import read_points
from analysis.runs import axis_columns, curves, fit_runs, points_table, run_table

COLUMNS = ["arm", "runs", "n_seeds", "status", "pred", "pred_lo", "pred_hi", "p_best", "budget",
           "last_compute", "extrapolation", "A", "B", "C_mid", "note"]
NAN = float("nan")


def _replicates(fits, budget):
    """Predicted reward at `budget` per bootstrap replicate, averaged over the arm's seeds."""
    boots = [sigmoid(budget, *f.boot.T) for f in fits if f.fitted and f.boot.shape[0] > 1]
    if not boots:
        return np.empty(0)
    n = min(b.size for b in boots)
    return np.mean([b[:n] for b in boots], axis=0)


def at_budget(points, budget, options: FitOptions = FitOptions(), fits=None) -> pd.DataFrame:
    """One row per arm: predicted reward at `budget`, its interval and P(best at budget), best first."""
    if not (np.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a compute > 0, got {budget!r}")
    points = points_table(points)
    fits = fit_runs(points, options) if fits is None else fits
    runs = run_table(points)
    axes = axis_columns(points)
    rows, draws = [], {}
    for arm, group in runs.groupby("arm", sort=False):
        members = list(group["run"])
        arm_fits = [fits[m] for m in members]
        fitted = [f for f in arm_fits if f.fitted]
        statuses = [f.status for f in arm_fits]
        status = "ok" if fitted and all(f.usable for f in fitted) else (
            "A_unidentified" if fitted else max(set(statuses), key=statuses.count))
        last = max((f.last_compute for f in fitted), default=NAN)
        rep = _replicates(fitted, budget)
        trusted = status == "ok" or (bool(fitted) and budget <= last)   # within the data, any fit will do
        if rep.size > 1 and trusted:
            draws[arm] = rep
        lo, hi = (np.percentile(rep, [50 * (1 - options.level), 50 * (1 + options.level)])
                  if rep.size > 1 else (NAN, NAN))
        note = ""
        if not fitted:
            note = f"no fit ({'; '.join(sorted(set(statuses)))})"
        elif not trusted:
            note = "A not identified: the forecast past the data is not to be trusted (no P(best))"
        row = {"arm": arm, "runs": ";".join(members), "n_seeds": len(members), "status": status,
               "pred": float(np.mean([f.predict(budget) for f in fitted])) if fitted else NAN,
               "pred_lo": float(lo), "pred_hi": float(hi), "p_best": NAN, "budget": float(budget),
               "last_compute": last, "extrapolation": budget / last if last > 0 else NAN,
               "A": float(np.mean([f.A for f in fitted])) if fitted else NAN,
               "B": float(np.exp(np.mean([np.log(f.B) for f in fitted]))) if fitted else NAN,
               "C_mid": float(np.exp(np.mean([np.log(f.C_mid) for f in fitted]))) if fitted else NAN,
               "note": note}
        row.update({a: group[a].iloc[0] for a in axes})
        rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS + axes)
    if draws:
        names = list(draws)
        n = min(d.size for d in draws.values())
        votes = np.argmax(np.vstack([draws[a][:n] for a in names]), axis=0)
        share = np.bincount(votes, minlength=len(names)) / n
        table["p_best"] = table["arm"].map(dict(zip(names, share))).astype(float)
    table = table.sort_values("pred", ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    return table


def format_budget(table: pd.DataFrame) -> str:
    if table.empty:
        return "(no runs)"
    budget = table["budget"].iloc[0]
    lines = [f"predicted reward at compute C = {budget:.4g} (interval: bootstrap; P(best): share of"
             f" bootstrap draws in which the arm is best)",
             f"{'arm':<40} {'status':<15} {'R(C) [interval]':<24} {'P(best)':>8} {'C / last':>9}"]
    for r in table.itertuples():
        pred = "-" if not np.isfinite(r.pred) else (
            f"{r.pred:.3f} [{r.pred_lo:.3f}, {r.pred_hi:.3f}]" if np.isfinite(r.pred_lo) else f"{r.pred:.3f}")
        p = "-" if not np.isfinite(r.p_best) else f"{r.p_best:.2f}"
        ext = "-" if not np.isfinite(r.extrapolation) else f"{r.extrapolation:.2f}x"
        lines.append(f"{str(r.runs)[:40]:<40} {r.status:<15} {pred:<24} {p:>8} {ext:>9}")
    lines += [f"  {r.runs}: {r.note}" for r in table.itertuples() if r.note]
    return "\n".join(lines)


def plot_budget(table, fits, data, budget, *, level, title="budget", axis_label="compute"):
    """Every arm's points and fitted curve out to the budget, with bands and R(budget)."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 5.2), layout="constrained")
        ax = fig.add_subplot()
        span = compute_span(data, reach=budget)
        if span is None:
            ax.text(0.5, 0.5, "no points", ha="center", transform=ax.transAxes)
            return fig
        x_lo, x_hi = span
        xs = np.geomspace(x_lo, x_hi, 300)
        tops = [float(np.nanmax(R)) for C, R in data.values() if np.isfinite(R).any()]
        lows = [float(np.nanmin(R)) for C, R in data.values() if np.isfinite(R).any()]
        for color, row in zip(colors(len(table)), table.itertuples()):
            members = str(row.runs).split(";")
            for m in members:
                C, R = data[m]
                ax.scatter(C[C > 0], R[C > 0], s=7, color=color, alpha=0.35, linewidths=0)
            member_fits = [fits[m] for m in members if fits[m].fitted]
            if not member_fits:
                continue
            last = row.last_compute
            trusted = row.status == "ok" or budget <= last
            shown = xs if trusted else xs[xs <= last]      # no forecast past the data for an unidentified A
            y = np.mean([f.predict(shown) for f in member_fits], axis=0)
            boots = [sigmoid(shown[None, :], *(f.boot[:, k:k + 1] for k in range(4)))
                     for f in member_fits if f.boot.shape[0] > 1]
            if boots and shown.size:
                n = min(b.shape[0] for b in boots)
                lo, hi = np.nanpercentile(np.mean([b[:n] for b in boots], axis=0),
                                          [50 * (1 - level), 50 * (1 + level)], axis=0)
                ax.fill_between(shown, np.clip(lo, 0, 1), np.clip(hi, 0, 1), color=color, alpha=0.15, linewidth=0)
                tops.append(float(np.nanmax(hi[shown <= last])) if (shown <= last).any() else np.nan)
            style = "-" if row.status == "ok" else "-."     # an unidentified A: dash-dot even over the data
            p = f", P(best) {row.p_best:.2f}" if np.isfinite(row.p_best) else ""
            name = str(row.runs)[:40]
            ax.plot(shown[shown <= last], y[shown <= last], style, color=color,
                    label=None if trusted else f"{name}: A not identified, no forecast")
            if trusted:
                ax.plot(shown[shown >= last], y[shown >= last], "--", color=color, label=f"{name}: {row.pred:.3f}{p}")
            if trusted and np.isfinite(row.pred_lo):
                tops.append(row.pred_hi)
                ax.errorbar([budget], [row.pred], yerr=[[row.pred - row.pred_lo], [row.pred_hi - row.pred]],
                            fmt="o", color=color, capsize=3, markersize=4)
        ax.axvline(budget, color="black", linestyle="-.", linewidth=1)
        ax.annotate(f"budget {budget:.3g}", (budget, 0.97), xycoords=("data", "axes fraction"),
                    xytext=(3, 0), textcoords="offset points", fontsize=8, va="top")
        ax.set_xscale("log")
        ax.set_xlim(x_lo, x_hi)
        top, low = np.nanmax(tops + [0.0]), np.nanmin(lows + [1.0])
        pad = 0.08 * max(top - low, 0.05)
        ax.set_ylim(max(low - pad, 0.0), min(top + pad, 1.0))   # what the data and trusted forecasts support
        ax.set_xlabel(axis_label)
        ax.set_ylabel("held-out pass rate")
        ax.set_title(f"{title}: predicted reward out to the budget (dashed: past the data;"
                     f" band: {100 * level:.0f}% bootstrap; dash-dot: A not identified)")
        ax.legend(loc="upper left", fontsize=8)
    return fig


def analyze_budget(path, out_dir, budget, options: FitOptions = FitOptions(), *, axis="compute",
                 plots="all", quiet=False, metrics=(io.REWARD_KEY,)):
    """Read a sweep (or points CSV), forecast every arm at `budget`: writes plan.csv (and plan.png); returns the table.
    metrics: the metrics.jsonl column(s) to forecast, as in `fit`. InputError if there are no runs."""
    out = Path(out_dir)
    points = path.copy() if isinstance(path, pd.DataFrame) else read_points(path, axis=axis, metrics=tuple(metrics))
    if points.empty:
        raise io.InputError(f"no runs found in {path}: nothing to forecast")
    ids = outputs.run_ids(points)
    settings = {**asdict(options), "axis": axis, "budget": float(budget), "metrics": list(metrics)}
    outputs.claim(out, "plan", ids, settings, quiet=quiet)      # another forecast moves to previous/
    fits = fit_runs(points, options)
    table = at_budget(points, budget, options, fits=fits)
    written = []
    if plots != "none":     # the figure first: a failure there leaves no plan.csv without its record
        title = "sweep" if isinstance(path, pd.DataFrame) else Path(str(path)).name
        written.append(writing.save_figure(plot_budget(table, fits, curves(points), budget, title=title,
                                                level=options.level, axis_label=axis_label(path, axis)),
                                      out / "plan.png"))
    written.insert(0, writing.write_csv(table, out / "plan.csv"))
    outputs.record(out, "plan", ids, settings, written)
    if not quiet:
        print(format_budget(table))
        print(f"\nwrote {out / 'plan.csv'}" + ("" if plots == "none" else f" and {out / 'plan.png'}"))
    return table
