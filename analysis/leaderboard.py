"""Rank recipes by A, then B: a pure function from the tidy points table to a ranked table.

Paper §1: ±0.02 is the margin on A (three seeds agreed within ±0.015); when two recipes'
A values are within it, refit both with A fixed to their mean and compare B.

Units of ranking: an arm with two or more seeds is ranked once, by its arm row (level
"arm"), and its seed rows (level "run") carry the arm's rank; a single-seed arm is ranked
by its run row.  Order: usable fits by A with the tie rule; then A_unidentified units by
predicted reward at a common compute (the target compute, else the smallest last compute
they share), since that is what their data does determine; other statuses get no rank.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from analysis.extrapolation import N_FINAL, final_pair
from analysis.fit import USABLE, FitOptions
from analysis.models import sigmoid
from analysis.runs import curves, fit_runs, run_table, validate
from analysis.uncertainty import percentile_interval, pooled_sd, seed_interval

MARGIN = 0.02
FRONT = ["rank", "run", "level", "arm", "seed", "n_seeds", "status", "A", "A_lo", "A_hi", "B",
         "B_lo", "B_hi", "C_mid", "C_mid_lo", "C_mid_hi", "R0", "n_points", "last_compute",
         "A_profile_lo", "A_profile_hi", "A_seed_sd", "rank_basis", "tie_group", "A_common",
         "B_common"]
NAN = float("nan")


def _mean_interval(values, boots, level, pooled=None):
    """Mean of per-seed estimates with an interval that covers both noise sources.

    Eval noise: average the seeds' bootstrap replicates row by row, take percentiles.
    Training randomness: the t-interval of the seed mean, with the seed spread pooled
    over the sweep's arms (paper §1: the seed spread is what sets the ±0.02 margin).
    The reported interval is the union of the two.
    """
    mean, sd, t_lo, t_hi = seed_interval(values, level, pooled)
    n = min((b.size for b in boots), default=0)
    b_lo, b_hi = percentile_interval(np.mean([b[:n] for b in boots], axis=0), level) if n > 1 else (NAN, NAN)
    lows = [v for v in (t_lo, b_lo, mean) if np.isfinite(v)] or [NAN]
    highs = [v for v in (t_hi, b_hi, mean) if np.isfinite(v)] or [NAN]
    return mean, sd, float(min(lows)), float(max(highs))


class _Unit:
    """One ranked entry: a single run, or an arm's seeds taken together."""

    def __init__(self, row, fits, members):
        self.row, self.fits, self.members = row, fits, members

    def predict(self, compute):
        fitted = [f for f in self.fits if f.fitted]
        return float(np.mean([f.predict(compute) for f in fitted])) if fitted else NAN

    def seed_predictions(self, compute):
        return [float(f.predict(compute)) for f in self.fits if f.usable]

    def predict_interval(self, compute, level, pooled=None):
        fitted = [f for f in self.fits if f.fitted]
        if len(fitted) == 1:
            lo, hi = fitted[0].band(compute, level)
            return float(lo[0]), float(hi[0])
        boots = [sigmoid(compute, *f.boot.T) for f in fitted if f.boot.shape[0] > 1]
        return _mean_interval([f.predict(compute) for f in fitted], boots, level, pooled)[2:]


def _seed_values(fits):
    """Per-parameter seed values of an arm's usable fits (B and C_mid on a log scale)."""
    usable = [f for f in fits if f.usable]
    return {"A": [f.A for f in usable], "B": [np.log(f.B) for f in usable],
            "C_mid": [np.log(f.C_mid) for f in usable]}


def _arm_row(arm, member_rows, fits, options, pooled):
    row = {k: v for k, v in member_rows[0].items() if k not in ("run", "seed")}
    row.update(run=f"arm {arm}", level="arm", seed=NAN, n_seeds=len(fits),
               n_points=sum(r["n_points"] for r in member_rows),
               last_compute=max(r["last_compute"] for r in member_rows),
               R0=float(np.nanmean([f.R0 for f in fits])) if any(np.isfinite(f.R0) for f in fits) else NAN)
    row.update(A_profile_lo=NAN, A_profile_hi=NAN, sse=NAN, rmse=NAN, flags="", reasons="")
    usable = [f for f in fits if f.usable] or [f for f in fits if f.fitted]   # else: no fit at all
    if not usable:
        statuses = [f.status for f in fits]
        row["status"] = max(set(statuses), key=statuses.count)
        row["reasons"] = f"no seed has a fit ({', '.join(statuses)})"
        return row
    for name, k, log in (("A", 0, False), ("B", 1, True), ("C_mid", 2, True)):   # B, C_mid > 0
        vals = [getattr(f, name) for f in usable]
        boots = [f.boot[:, k] for f in usable if f.boot.shape[0] > 1]
        if log:
            vals, boots = np.log(vals), [np.log(b) for b in boots]
        mean, sd, lo, hi = _mean_interval(vals, boots, options.level, pooled.get(name))
        if log:
            mean, lo, hi = np.exp(mean), np.exp(lo), np.exp(hi)
        row.update({name: mean, f"{name}_lo": lo, f"{name}_hi": hi})
        if name == "A":
            row["A_seed_sd"] = sd
    all_ok = all(f.usable for f in fits)
    row["status"] = "ok" if usable[0].usable else "A_unidentified"
    reasons = [] if all_ok else [f"{sum(f.usable for f in fits)}/{len(fits)} seeds usable"]
    if row["A_hi"] - row["A_lo"] > options.max_a_width:
        row["status"] = "A_unidentified"
        reasons.append(f"the interval on the arm's A is wider than {options.max_a_width}")
    row["reasons"] = "; ".join(reasons)
    return row


def _refit_common_a(points, units, A_common, options):
    """B of each unit refitted with A fixed to the group's mean A (paper §1 tie rule)."""
    # only the point estimate is needed; a fixed A has no paper grid to search
    refit = replace(options, a_fixed=A_common, n_boot=0, profile=False, method="closed_form")
    out = []
    for unit in units:
        runs = [m for m, f in zip(unit.members, unit.fits) if f.usable]
        refits = fit_runs(points[points["run"].isin(runs)], refit)
        out.append(float(np.nanmean([f.B for f in refits.values()])) if refits else NAN)
    return out


def _rank(points, units, margin, target_compute, options):
    """Assign rank, rank_basis, tie_group, A_common, B_common in place; return notes."""
    notes, ordered = [], []
    usable = sorted((u for u in units if u.row["status"] in USABLE), key=lambda u: -u.row["A"])
    i, group = 0, 0
    while i < len(usable):
        j = i
        while j + 1 < len(usable) and usable[j + 1].row["A"] >= usable[i].row["A"] - margin:
            j += 1
        cluster = usable[i:j + 1]
        if len(cluster) > 1:
            group += 1
            A_common = float(np.mean([u.row["A"] for u in cluster]))
            B_common = _refit_common_a(points, cluster, A_common, options)
            for u, b in zip(cluster, B_common):
                u.row.update(tie_group=group, A_common=A_common, B_common=b,
                             rank_basis=f"B at common A={A_common:.3f}")
            cluster = [u for _, u in sorted(zip(B_common, cluster), key=lambda p: -np.nan_to_num(p[0], nan=-1))]
        else:
            cluster[0].row["rank_basis"] = "A"
        ordered += cluster
        i = j + 1
    unidentified = [u for u in units if u.row["status"] == "A_unidentified"]
    if unidentified:
        lasts = [u.row["last_compute"] for u in unidentified if np.isfinite(u.row["last_compute"])]
        c_ref = target_compute or (min(lasts) if lasts else NAN)
        for u in unidentified:
            u.row["rank_basis"] = f"reward at C={c_ref:.4g}"
        unidentified.sort(key=lambda u: -np.nan_to_num(u.predict(c_ref), nan=-np.inf))
        notes.append(f"A_unidentified rows are ranked after all identified ones, by predicted"
                     f" reward at C={c_ref:.4g}; their A is not a number to trust")
    for rank, u in enumerate(ordered + unidentified, start=1):
        u.row["rank"] = rank
    return notes


def leaderboard(points, fits=None, options: FitOptions = FitOptions(), *, margin=MARGIN,
                target_compute=None, n_final=N_FINAL):
    """Ranked table: one row per run, plus one per arm with two or more seeds.

    points: tidy table (see analysis.runs); fits: {run: FitResult} to reuse, else fitted
    here with `options`, which also give the tie rule's refits, the arm rows' interval
    level and max_a_width.
    target_compute: also rank by predicted reward there (pred_target, rank_target).
    With options.fit_until, pred_final/obs_final compare the forecast with the last evals.
    """
    points = validate(points)
    runs = run_table(points)
    fits = fit_runs(points, options) if fits is None else fits
    data = curves(points)
    level = options.level
    rows, units = {}, []
    for meta in runs.to_dict("records"):
        C, R = data[meta["run"]]
        fit = fits[meta["run"]]
        row = {**meta, **fit.to_row(), "level": "run", "n_seeds": 1,
               "last_compute": float(C.max()) if C.size else NAN, "rank": NAN,
               "rank_basis": "", "tie_group": NAN, "A_common": NAN, "B_common": NAN, "A_seed_sd": NAN}
        if options.fit_until is not None:
            row["pred_final"], row["obs_final"] = final_pair(fit, C, R, n_final)
        rows[meta["run"]] = row
    arms = [(arm, list(members)) for arm, members in runs.groupby("arm", sort=False)["run"]]
    seed_values = [_seed_values([fits[m] for m in members]) for _, members in arms if len(members) > 1]
    pooled = {name: pooled_sd([v[name] for v in seed_values]) for name in ("A", "B", "C_mid")}
    for arm, members in arms:
        member_fits = [fits[m] for m in members]
        if len(members) == 1:
            units.append(_Unit(rows[members[0]], member_fits, members))
            continue
        arm_row = _arm_row(arm, [rows[m] for m in members], member_fits, options, pooled)
        arm_row.update(rank=NAN, rank_basis="", tie_group=NAN, A_common=NAN, B_common=NAN)
        units.append(_Unit(arm_row, member_fits, members))
    notes = _rank(points, units, margin, target_compute, options)
    pooled_target = pooled_sd([u.seed_predictions(target_compute) for u in units
                               if len(u.members) > 1]) if target_compute else None
    sd, dof = pooled["A"]
    if dof and 2 * sd > margin:
        notes.append(f"seeds spread A by ±{2 * sd:.3f} (2 x pooled sd, {dof} dof), wider than the"
                     f" margin {margin} (paper: ±0.015 -> ±0.02); consider --margin {2 * sd:.3f}")
    for unit in units:
        if target_compute:
            lo, hi = unit.predict_interval(target_compute, level, pooled_target)
            unit.row.update(pred_target=unit.predict(target_compute), pred_target_lo=lo,
                            pred_target_hi=hi, target_compute=float(target_compute))
        if unit.row["level"] == "arm":
            for m in unit.members:
                rows[m]["rank"] = unit.row["rank"]
                if target_compute:
                    fit = fits[m]
                    rows[m]["pred_target"] = fit.predict(target_compute) if fit.fitted else NAN
    if target_compute:        # "which recipe wins at my budget?": rank units by R(C*)
        by_budget = pd.Series([u.row["pred_target"] for u in units]).rank(ascending=False, method="min")
        for unit, rank in zip(units, by_budget):
            unit.row["rank_target"] = rank
    table = pd.DataFrame([u.row for u in units if u.row["level"] == "arm"] + list(rows.values()))
    table["_arm_first"] = table["level"].ne("arm")
    table = table.sort_values(["rank", "arm", "_arm_first", "run"], na_position="last", kind="stable")
    table = table.drop(columns="_arm_first").reset_index(drop=True)
    front = [c for c in FRONT if c in table.columns]
    table = table[front + [c for c in table.columns if c not in front]]
    table.attrs["notes"] = notes
    return table


def _cell(row, p, fmt):
    v, lo, hi = row.get(p, NAN), row.get(f"{p}_lo", NAN), row.get(f"{p}_hi", NAN)
    if not np.isfinite(v):
        return "-"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if np.isfinite(lo) else f"{v:{fmt}}"


def _axis_value(value):
    if value is None or value != value:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _text_table(cells, left):
    """Columns padded to width: text columns left-aligned, numbers right-aligned."""
    columns = list(dict.fromkeys(k for c in cells for k in c))
    width = {k: max(len(k), *(len(c.get(k, "")) for c in cells)) for k in columns}
    pad = lambda k, v: v.ljust(width[k]) if k in left else v.rjust(width[k])   # noqa: E731
    rows = [[pad(k, k) for k in columns]] + [[pad(k, c.get(k, "")) for k in columns] for c in cells]
    return "\n".join("  ".join(r).rstrip() for r in rows)


def format_leaderboard(board, axes=(), max_rows=60):
    """The ranked table as plain text, with each non-ok status explained underneath.

    A is never printed for A_unidentified rows (it sits on a bound or is unsupported by
    the data); their interval, if any, is in leaderboard.csv.
    """
    if board.empty:
        return "(no runs)"
    lines, cells = [], []
    multi_seed_arms = set(board.loc[board["level"] == "arm", "arm"])
    for row in board.head(max_rows).to_dict("records"):
        identified = row["status"] in USABLE
        cell = {
            "rank": f"{int(row['rank'])}" if np.isfinite(row.get("rank", NAN)) else "-",
            "run": ("  " if row["level"] == "run" and row["arm"] in multi_seed_arms else "") + str(row["run"]),
            "status": row["status"],
            "A [95%]": _cell(row, "A", ".3f") if identified else ("not identified" if np.isfinite(row["A"]) else "-"),
            "B [95%]": _cell(row, "B", ".2f") if np.isfinite(row.get("B", NAN)) else "-",
            "C_mid": f"{row['C_mid']:.3g}" if np.isfinite(row.get("C_mid", NAN)) else "-",
            "R0": f"{row['R0']:.3f}" if np.isfinite(row.get("R0", NAN)) else "-",
            "pts": f"{int(row['n_points'])}",
        }
        if np.isfinite(row.get("B_common", NAN)):
            cell["B@common A"] = f"{row['B_common']:.2f}"
        if "pred_target" in row and np.isfinite(row.get("pred_target", NAN)):
            cell["R(C*) [95%]"] = _cell({"p": row["pred_target"], "p_lo": row.get("pred_target_lo", NAN),
                                         "p_hi": row.get("pred_target_hi", NAN)}, "p", ".3f")
        if "pred_final" in row:
            cell["pred/obs final"] = (f"{row['pred_final']:.3f}/{row['obs_final']:.3f}"
                                      if np.isfinite(row["pred_final"]) else "-")
        for axis in axes:
            cell[axis] = _axis_value(row.get(axis))
        cells.append(cell)
    lines.append(_text_table(cells, left={"run", "status"} | set(axes)))
    if len(board) > max_rows:
        lines.append(f"... {len(board) - max_rows} more rows in leaderboard.csv")
    explained = board[~board["status"].isin(USABLE) & (board["reasons"].fillna("") != "")]
    for row in explained.head(max_rows).itertuples():
        lines.append(f"  {row.run}: {row.status} - {row.reasons}")
    lines += [f"note: {n}" for n in board.attrs.get("notes", [])]
    return "\n".join(lines)
