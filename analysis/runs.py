"""The tidy points table every reader produces, and fitting each run in it.

One row per eval point.  Columns:
    run        required  run name (unique in the sweep)
    compute    required  the x-axis: training FLOPs by default, or device-hours or tokens
    reward     required  held-out pass rate in [0, 1] (the paper's R)
    step, epoch, r0, seed, arm, run_status, loss_clamp, error    optional, per run or point
    study, train_steps   optional, per run: where a run was trained, and for how many steps
    anything else        an axis of the sweep (loss, precision, ...), constant per run
The step-0 eval (compute 0) is R0.  A run whose summary says it failed keeps one row with
NaN compute so that it still shows on the leaderboard.
"""
from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis.fit import FitOptions, FitResult, fit_sigmoid
from analysis.io import InputError
from analysis.uncertainty import BOOT_BYTES, boot_limit, memory_bytes

REQUIRED = ("run", "compute", "reward")
RESERVED = frozenset({
    "run", "compute", "reward", "step", "epoch", "r0", "seed", "arm", "run_status",
    "loss_clamp", "error", "run_dir", "level", "device_hours", "tokens", "pass_rate",
    "config_hash", "study", "train_steps"})
RUN_FAILED = "failed"           # summary.json status that means "do not fit"


def points_table(points):
    """A copy with the required columns, `run` as str and numeric compute/reward."""
    missing = [c for c in REQUIRED if c not in points.columns]
    if missing:
        raise ValueError(f"points table lacks column(s) {missing}; need {list(REQUIRED)}")
    out = points.copy()
    out["run"] = out["run"].astype(str)
    for col in ("compute", "reward", "epoch", "r0"):
        if col in out.columns:
            out[col] = pd.to_numeric(out[col], errors="coerce")
    return out


def axis_columns(points):
    """The sweep's design axes: every column that is not reserved and not a truth column."""
    return [c for c in points.columns if c not in RESERVED and not c.startswith("true_")]


def run_table(points):
    """One row per run, in order of first appearance: run, arm, seed, run_status, axes...

    Arms (paper: seeds of one recipe) come from the `arm` column (the trainer's arm_hash);
    without it, runs with a `seed` column and identical axis values are one arm; otherwise
    every run is its own arm.
    """
    points = points_table(points)
    axes = axis_columns(points)
    extra = [c for c in ("arm", "seed", "run_status", "loss_clamp", "error") if c in points.columns]
    where = [c for c in ("study", "train_steps") if c in points.columns]
    extra += where
    runs = points.groupby("run", sort=False)[extra + axes].first().reset_index()
    if "arm" not in runs.columns or runs["arm"].isna().all():
        if "seed" in runs.columns and axes:
            runs["arm"] = ["|".join(map(str, values)) for values in runs[axes].itertuples(index=False)]
        else:
            runs["arm"] = runs["run"]
    runs["arm"] = runs["arm"].fillna(runs["run"]).astype(str)
    for col in ("seed", "run_status", "loss_clamp", "error"):
        if col not in runs.columns:
            runs[col] = np.nan
    return runs[["run", "arm", "seed", "run_status", "loss_clamp", "error"] + where + axes]


def run_seed(run, seed):
    """A per-run bootstrap seed that does not depend on the order runs are fitted in."""
    return (int(seed) + zlib.crc32(str(run).encode())) % (2**31)


def fit_runs(points, options: FitOptions = FitOptions()):
    """{run: FitResult} for every run in the table; failed runs get status run_failed.

    options.r0, when given, applies to every run; otherwise a per-run `r0` column,
    otherwise the step-0 eval.  Each run's bootstrap seed comes from options.seed and
    its name (run_seed).
    """
    points = points_table(points)
    meta = run_table(points).set_index("run")
    sizes = points.groupby("run", sort=False).size()
    if len(sizes) and options.n_boot > boot_limit(sizes.max()):   # before the first fit, not after an hour
        raise InputError(f"--n-boot {options.n_boot}: the bootstrap of run {sizes.idxmax()!r} ({sizes.max()} points)"
                         f" needs about {options.n_boot * sizes.max() * BOOT_BYTES / 2**30:.1f} GiB, over half this"
                         f" machine's {memory_bytes() / 2**30:.0f} GiB; give at most {boot_limit(sizes.max())}")
    fits = {}
    for run, group in points.groupby("run", sort=False):
        if str(meta.at[run, "run_status"]).lower() == RUN_FAILED:
            error = meta.at[run, "error"]
            why = f"summary.json status failed: {error}" if isinstance(error, str) else "summary.json status failed"
            fits[run] = FitResult(status="run_failed", reasons=(why,))
            continue
        r0 = options.r0
        if r0 is None and "r0" in group.columns and group["r0"].notna().any():
            r0 = float(group["r0"].dropna().iloc[0])
        epoch = group["epoch"].to_numpy(float) if "epoch" in group.columns else None
        fits[run] = fit_sigmoid(group["compute"].to_numpy(float), group["reward"].to_numpy(float),
                                replace(options, r0=r0, seed=run_seed(run, options.seed)), epoch=epoch)
    return fits


def curves(points):
    """{run: (compute, reward)} with finite, compute-sorted points."""
    points = points_table(points)
    out = {}
    for run, group in points.groupby("run", sort=False):
        g = group[np.isfinite(group["compute"]) & np.isfinite(group["reward"])].sort_values("compute")
        out[run] = (g["compute"].to_numpy(float), g["reward"].to_numpy(float))
    return out
