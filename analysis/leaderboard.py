"""Rank recipes by A, then B: a pure function from the tidy points table to a ranked table.

Paper §1: ±0.02 is the margin on A (three seeds agreed within ±0.015); when two recipes'
A values are within it, refit both with A fixed to their mean and compare B.

Rank only what the evidence separates.  Units whose intervals overlap, or whose values are
within the margin, share a rank (competition ranking: 1, 1, 3) and a `tie_group`; within a
group the rows are listed by B at their common A (the paper's tie rule) or by value, but
that order is not a ranking.  A unit ties with the best remaining unit, not with its
neighbour, so a group is "everything not separated from its top".

Units of ranking: an arm with two or more seeds is ranked once, by its arm row (level
"arm"), and its seed rows (level "run") carry the arm's rank; a single-seed arm is ranked
by its run row.  Order: usable fits by A; then A_unidentified units by predicted reward at
a reference compute C_ref (the target compute, else the smallest last compute the fitted
units share: a point every one of them observed), since that is what their data does
determine; other statuses get no rank.  A_unidentified rows carry no A: their optimizer
value is kept only in the diagnostic columns A_raw, A_raw_lo, A_raw_hi.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis.board_text import format_leaderboard, ranked_units  # noqa: F401  (format_leaderboard: re-exported)
from analysis.extrapolation import N_FINAL, final_band, final_pair
from analysis.fit import USABLE, FitOptions
from analysis.models import sigmoid
from analysis.runs import curves, fit_runs, points_table, run_table
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


def arm_name(arm, runs) -> str:
    """A multi-seed arm's row name: what its runs' names share once the seed and the run hash are
    dropped ("model=tiny_moe,routing=replay,seed=1-3bbfa917" -> "model=tiny_moe,routing=replay"),
    then the arm's key, which keeps two arms apart whatever their names.

    >>> arm_name("a1d885af", ["routing=replay,seed=1-3bbfa917", "routing=replay,seed=2-0e60542e"])
    'routing=replay (arm a1d885af)'
    >>> arm_name("f2aed461", ["seed=1-ab3d56e7", "seed=2-903cb5a5"])
    'arm f2aed461'
    """
    names = {",".join(p for p in re.sub(r"-[0-9a-f]{8}$", "", str(r)).split(",") if not p.startswith("seed="))
             for r in runs}
    return f"{names.pop()} (arm {arm})" if len(names) == 1 and "" not in names else f"arm {arm}"


def _arm_row(arm, member_rows, fits, options, pooled):
    row = {k: v for k, v in member_rows[0].items() if k not in ("run", "seed")}
    row.update(run=arm_name(arm, [r["run"] for r in member_rows]), level="arm", seed=NAN, n_seeds=len(fits),
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


def tie_ranks(values, lo, hi, margin=0.0):
    """Competition ranks that separate only what the evidence separates.

    The best remaining value opens a group; every remaining value within `margin` of it, or
    whose interval [lo, hi] overlaps its interval, joins the group and shares its rank.
    Non-finite values get no rank.  Returns (rank, group, order): ranks and group ids (NaN
    for a group of one) in input order, and the input indices in listing order.
    >>> tie_ranks([0.70, 0.69, 0.50], [0.66, 0.60, 0.49], [0.74, 0.71, 0.51])[0].tolist()
    [1.0, 1.0, 3.0]
    >>> tie_ranks([0.70, 0.60], [0.69, 0.59], [0.71, 0.61], margin=0.02)[0].tolist()  # apart
    [1.0, 2.0]
    """
    v, lo, hi = (np.asarray(x, dtype=float) for x in (values, lo, hi))
    rank, group = np.full(v.size, NAN), np.full(v.size, NAN)
    left = sorted((i for i in range(v.size) if np.isfinite(v[i])), key=lambda i: -v[i])
    order, n_groups = [], 0
    while left:
        top = left[0]
        tied = [i for i in left if v[top] - v[i] <= margin + 1e-12
                or (np.isfinite(lo[top]) and np.isfinite(hi[i]) and hi[i] >= lo[top])]
        rank[tied] = len(order) + 1
        if len(tied) > 1:
            n_groups += 1
            group[tied] = n_groups
        order += tied
        left = [i for i in left if i not in tied]
    return rank, group, order + [i for i in range(v.size) if not np.isfinite(v[i])]


def _blocks(order, groups):
    """`order` cut into its groups (tie_ranks lists each group contiguously)."""
    blocks = []
    for i in order:
        if blocks and np.isfinite(groups[i]) and groups[blocks[-1][0]] == groups[i]:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    return blocks


def _rank(points, units, margin, c_ref, options):
    """Assign rank, rank_basis, tie_group, A_common and B_common to the units' rows; return
    the listing position of each ranked unit ({id(unit): position}).

    The basis is A when every rankable unit has an identified A.  Otherwise A cannot order
    them (an unidentified A is only a bound), so every fitted unit is ranked by its predicted
    reward at C_ref, a compute every one of them reached: what their data does determine.
    """
    rankable = [u for u in units if u.row["status"] in USABLE or u.row["status"] == "A_unidentified"]
    by_a = all(u.row["status"] in USABLE for u in rankable)
    basis, key = ("A", "A") if by_a else (f"reward at C_ref={c_ref:.4g}", "R_ref")
    ranks, groups, order = tie_ranks(*([u.row.get(f"{key}{s}", NAN) for u in rankable] for s in ("", "_lo", "_hi")),
                                     margin=margin)
    listed, n_groups, positions = 0, 0, {}
    for block in _blocks(order, groups):
        if len(block) > 1:
            n_groups += 1
            why = f"{basis}; tied (intervals overlap or within {margin})"
            if by_a:                    # the paper's tie rule orders the listing, not the rank
                cluster = [rankable[i] for i in block]
                A_common = float(np.mean([u.row["A"] for u in cluster]))
                B_common = _refit_common_a(points, cluster, A_common, options)
                for u, b in zip(cluster, B_common):
                    u.row.update(A_common=A_common, B_common=b)
                block = [i for _, i in sorted(zip(B_common, block), key=lambda p: -np.nan_to_num(p[0], nan=-1))]
                why += f", listed by B at common A={A_common:.3f}"
            for i in block:
                rankable[i].row.update(tie_group=n_groups, rank_basis=why)
        elif np.isfinite(ranks[block[0]]):
            rankable[block[0]].row["rank_basis"] = basis
        for i in block:
            rankable[i].row["rank"] = ranks[i]
            positions[id(rankable[i])] = listed
            listed += 1
    return positions


def _reference_compute(units, target_compute):
    """C_ref: the target compute, else the smallest last compute of the units with a fit."""
    if target_compute:
        return float(target_compute)
    lasts = [u.row["last_compute"] for u in units if any(f.fitted for f in u.fits)
             and np.isfinite(u.row["last_compute"])]
    return min(lasts) if lasts else NAN


def _notes(board, units, fits, c_ref, target_compute, margin):
    """What a reader must know before trusting the order: ties, unidentified A, mixed runs."""
    notes = []
    units_ranked = ranked_units(board)
    ranked = units_ranked[units_ranked["rank"].notna()]
    shared = ranked["rank"].duplicated(keep=False)
    if shared.any():
        notes.append(f"rows sharing a rank are tied: their intervals overlap or their values are within"
                     f" {margin}; the evidence does not order them ({int(shared.sum())} of {len(ranked)})")
    n_unid = sum(u.row["status"] == "A_unidentified" for u in units)
    if n_unid:
        notes.append(f"{n_unid} of {len(units)} entries are A_unidentified: the curve has not bent toward its plateau, so A"
                     f" is not pinned down; every fitted row is therefore ranked by its reward at C_ref={c_ref:.4g},"
                     " a compute all of them reached. Train longer (more steps) or add seeds to identify A")
    for col, what in (("train_steps", "training lengths"), ("study", "studies")):
        if col in board.columns:
            values = board.loc[board["level"] == "run", col].dropna().astype(str)
            counts = values.value_counts()
            if len(counts) > 1:
                listed = ", ".join(f"{k}: {v} run(s)" for k, v in counts.items())
                extra = (" -- compare them at a common compute (--target-compute), not by A" if col == "train_steps"
                         else "; a run reused by config hash counts under the study that trained it")
                notes.append(f"these runs mix {len(counts)} {what} ({listed}){extra}")
    warnings = []
    if target_compute:
        lasts = np.array([f.last_compute for f in fits.values() if f.fitted], dtype=float)
        beyond = target_compute / lasts[np.isfinite(lasts) & (lasts > 0)]
        if beyond.size and beyond.max() > 1.0:
            span = (f"{beyond.max():.2g}x" if beyond.max() - beyond.min() < 0.05 * beyond.max()
                    else f"{max(beyond.min(), 1.0):.2g}x to {beyond.max():.2g}x")
            warnings.append(f"C*={target_compute:.4g} lies {span} beyond the last fitted compute: R(C*) extrapolates"
                            " the sigmoid past the data (column target_beyond), and its interval covers eval noise"
                            " only; it can exceed what the task allows")
    return notes, warnings


def _hide_unidentified_a(table):
    """A_unidentified rows show no A: the optimizer's value moves to the A_raw columns."""
    unid = table["status"] == "A_unidentified"
    for col in ("A", "A_lo", "A_hi"):
        table[col.replace("A", "A_raw", 1)] = table[col].where(unid)
        table.loc[unid, col] = NAN
    for col in ("A_profile_lo", "A_profile_hi"):
        if col in table.columns:
            table.loc[unid, col] = NAN
    return table


def _run_rows(points, fits, options, n_final):
    """One row per run: its metadata, its fit, and (with options.fit_until) the forecast of its end."""
    data = curves(points)
    rows = {}
    for meta in run_table(points).to_dict("records"):
        C, R = data[meta["run"]]
        fit = fits[meta["run"]]
        row = {**meta, **fit.to_row(), "level": "run", "n_seeds": 1,
               "last_compute": float(C.max()) if C.size else NAN, "rank": NAN,
               "rank_basis": "", "tie_group": NAN, "A_common": NAN, "B_common": NAN, "A_seed_sd": NAN}
        if options.fit_until is not None:
            row["pred_final"], row["obs_final"] = final_pair(fit, C, R, n_final)
            row["pred_final_lo"], row["pred_final_hi"] = final_band(fit, C, R, n_final, options.level)
        rows[meta["run"]] = row
    return rows


def _units(points, rows, fits, options):
    """The ranked entries: each single-seed arm's run row, each multi-seed arm's arm row; and the
    seed spread pooled over the multi-seed arms ({parameter: (sd, dof)})."""
    arms = [(arm, list(members)) for arm, members in run_table(points).groupby("arm", sort=False)["run"]]
    seed_values = [_seed_values([fits[m] for m in members]) for _, members in arms if len(members) > 1]
    pooled = {name: pooled_sd([v[name] for v in seed_values]) for name in ("A", "B", "C_mid")}
    units = []
    for arm, members in arms:
        member_fits = [fits[m] for m in members]
        if len(members) == 1:
            units.append(_Unit(rows[members[0]], member_fits, members))
            continue
        arm_row = _arm_row(arm, [rows[m] for m in members], member_fits, options, pooled)
        arm_row.update(rank=NAN, rank_basis="", tie_group=NAN, A_common=NAN, B_common=NAN)
        units.append(_Unit(arm_row, member_fits, members))
    return units, pooled


def _predictions(units, compute, level):
    """Each unit's predicted reward at ``compute`` with its interval: [(R, lo, hi)], the seed
    spread pooled over the multi-seed units."""
    if not (compute and np.isfinite(compute)):
        return [(NAN, NAN, NAN)] * len(units)
    pooled = pooled_sd([u.seed_predictions(compute) for u in units if len(u.members) > 1])
    return [(u.predict(compute), *u.predict_interval(compute, level, pooled)) for u in units]


def _listing(units, rows, positions):
    """The table's rows in order: ranked units by position, then the rest by arm; an arm row
    before its seeds' rows (by run name), which carry the arm's rank."""
    def key(unit):
        pos = positions.get(id(unit))
        return (pos is None, pos if pos is not None else 0, str(unit.row["arm"]))

    out = []
    for unit in sorted(units, key=key):
        if unit.row["level"] != "arm":
            out.append(unit.row)
            continue
        out.append(unit.row)
        for m in sorted(unit.members, key=str):
            out.append({**rows[m], "rank": unit.row["rank"]})
    return out


def _seed_note(pooled, margin):
    sd, dof = pooled["A"]
    return (f"seeds spread A by ±{2 * sd:.3f} (2 x pooled sd, {dof} dof), wider than the"
            f" margin {margin} (paper: ±0.015 -> ±0.02); consider --margin {2 * sd:.3f}"
            if dof and 2 * sd > margin else None)


def leaderboard(points, fits=None, options: FitOptions = FitOptions(), *, margin=MARGIN,
                target_compute=None, n_final=N_FINAL):
    """Ranked table: one row per run, plus one per arm with two or more seeds.

    points: tidy table (see analysis.runs); fits: {run: FitResult} to reuse, else fitted
    here with `options`, which also give the tie rule's refits, the interval level and
    max_a_width.  margin: values this close tie whatever their intervals (paper: 0.02).
    target_compute: also rank by predicted reward there (pred_target, rank_target, with
    the same ties), and use it as C_ref.  With options.fit_until, pred_final/obs_final
    (and pred_final_lo/hi) compare the forecast with the last evals.
    Notes and warnings for the reader are in board.attrs["notes"] and ["warnings"].
    """
    points = points_table(points)
    fits = fit_runs(points, options) if fits is None else fits
    rows = _run_rows(points, fits, options, n_final)
    units, pooled = _units(points, rows, fits, options)
    # ------------------------------------- predicted reward at C_ref: the basis for unidentified A
    c_ref = _reference_compute(units, target_compute)
    for unit, (R, lo, hi) in zip(units, _predictions(units, c_ref, options.level)):
        unit.row.update(C_ref=c_ref, R_ref=R, R_ref_lo=lo, R_ref_hi=hi)
    # ------------------------------------------------------------------------------- rank
    positions = _rank(points, units, margin, c_ref, options)
    # --------------------------------- "which recipe wins at my budget?": R(C*), with ties
    if target_compute:
        for unit, (R, lo, hi) in zip(units, _predictions(units, target_compute, options.level)):
            last = max((f.last_compute for f in unit.fits if f.fitted), default=NAN)
            unit.row.update(pred_target=R, pred_target_lo=lo, pred_target_hi=hi, target_compute=float(target_compute),
                            target_beyond=float(target_compute) / last if last > 0 else NAN)
        for m in (m for u in units if u.row["level"] == "arm" for m in u.members):  # an arm's seeds, each
            rows[m]["pred_target"] = fits[m].predict(target_compute) if fits[m].fitted else NAN
        rank_target, _, _ = tie_ranks(*([u.row[f"pred_target{s}"] for u in units] for s in ("", "_lo", "_hi")),
                                      margin=margin)
        for unit, rank in zip(units, rank_target):
            unit.row["rank_target"] = rank
    # ------------------------------------------------------------------------------ table
    table = _hide_unidentified_a(pd.DataFrame(_listing(units, rows, positions)))
    front = [c for c in FRONT if c in table.columns]
    table = table[front + [c for c in table.columns if c not in front]]
    notes, warnings = _notes(table, units, fits, c_ref, target_compute, margin)
    seed_note = _seed_note(pooled, margin)
    table.attrs["notes"] = notes + ([seed_note] if seed_note else [])
    table.attrs["warnings"] = warnings
    return table
