"""The eval schedule's A/B on the same runs: every-20 evals against the log-spaced default.

A sweep run with dense evals (``train.eval_every=10``, the ``--grid``) holds both schedules: its
rows at 0, 20, 40, ... are the every-20 schedule, and its rows at the default's log-spaced steps
(``eval_steps(steps)``: 16 points from step 10, plus step 0), each rounded half up to the
nearest step of the dense grid, are the log schedule (two log steps that round to one grid step
merge). Each run is fitted on each subset, and its first half of compute forecasts the
mean of its last 3 evals (``python -m analysis extrapolate --fraction 0.5``), so the two
schedules are compared on the same training trajectories, not on different runs. The
user's command's criteria (docs/findings.md) are printed per schedule too.

    python -m scalerl.sweep -m seed=0,1,2 loss=cispo,dapo,gspo train.eval_every=10
    python benchmarks/eval_schedule_ab.py outputs/sweeps/<study> --grid 10 [--every 20] [--csv runs.csv]

Prints three tables: per run and schedule (A, B, C_mid and their 95% interval widths,
status, the half-compute forecast error), the criteria per schedule and seed, and the
leaderboard's rows (runs, and arms with 2+ seeds pooled) per schedule.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from analysis import io
from analysis.extrapolation import extrapolation_check
from analysis.fit import FitOptions
from analysis.leaderboard import leaderboard
from analysis.runs import fit_runs
from analysis.writing import write_csv
from scalerl.config.eval_schedule import eval_steps

GAIN = 0.25      # the final pass rate (mean of the last 4 evals) at least R0 + 0.25
FALL = 0.1       # after the first 10% of steps, no eval more than 0.1 below the running best
WITHIN = 0.02    # a half-compute forecast this close counts (the paper's margin)


def schedule_steps(steps: int, grid: int, every: int) -> dict[str, list[int]]:
    """The step subsets of each schedule on a dense grid of ``grid`` steps."""
    snap = sorted({min(steps, grid * math.floor(s / grid + 0.5)) for s in eval_steps(steps)})  # half up
    return {f"every{grid}": sorted({*range(0, steps + 1, grid), steps}),
            f"every{every}": eval_steps(steps, every=every),
            "log": snap}


def criteria(points: pd.DataFrame, fits: dict, forecast: pd.DataFrame) -> pd.DataFrame:
    """Per run: gain over R0, worst fall after 10% of steps, fit status, forecast error."""
    rows = []
    fc = forecast.set_index("run")
    err, bias = fc["abs_error"], fc["pred_final"] - fc["obs_final"]
    for run, g in points.sort_values("step").groupby("run", sort=False):
        r = g["reward"].to_numpy(float)
        s = g["step"].to_numpy(float)
        best = np.maximum.accumulate(r)
        late = s >= 0.1 * s.max()
        rows.append({"run": run, "seed": g["seed"].iloc[0], "loss": g["loss"].iloc[0],
                     "R0": r[0], "final": r[-4:].mean(), "gain": r[-4:].mean() - r[0],
                     "worst_fall": float((best - r)[late].max()), "status": fits[run].status,
                     "forecast_err": float(err.get(run, math.nan)), "forecast_bias": float(bias.get(run, math.nan)),
                     "n_points": len(r)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep_dir")
    ap.add_argument("--grid", type=int, default=5, help="the sweep's train.eval_every")
    ap.add_argument("--every", type=int, default=20, help="the every-N schedule to compare")
    ap.add_argument("--n-boot", type=int, default=FitOptions.n_boot)
    ap.add_argument("--csv", default=None, help="also write the per-run table here")
    args = ap.parse_args()

    points = io.read_sweep(args.sweep_dir)
    points = points[points["compute"].notna()]
    steps = int(points["train_steps"].max()) if "train_steps" in points else int(points["step"].max())
    options = FitOptions(n_boot=args.n_boot)
    per_run, crit, arms = [], [], []
    for name, keep in schedule_steps(steps, args.grid, args.every).items():
        sub = points[points["step"].isin(keep)].reset_index(drop=True)
        fits = fit_runs(sub, options)
        fc = extrapolation_check(sub, 0.5, options).per_run
        c = criteria(sub, fits, fc)
        c.insert(0, "schedule", name)
        crit.append(c)
        for run, f in fits.items():
            per_run.append({"schedule": name, "run": run, "status": f.status, "n": f.n_points, "A": f.A,
                            "A_w": f.A_hi - f.A_lo, "B": f.B, "B_w": f.B_hi - f.B_lo,
                            "C_mid": f.C_mid, "C_mid_w_rel": (f.C_mid_hi - f.C_mid_lo) / f.C_mid,
                            "forecast_err": c.set_index("run").at[run, "forecast_err"]})
        board = leaderboard(sub, fits, options)
        arm_rows = board.copy()   # a row per run, and per arm with two or more seeds (level "arm")
        arm_rows.insert(0, "schedule", name)
        arms.append(arm_rows)
        print(f"[{name}] {len(keep)} steps: {keep}", flush=True)

    table = pd.DataFrame(per_run)
    crit = pd.concat(crit, ignore_index=True)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    print("\n## Per run and schedule (95% interval widths; C_mid's relative to C_mid)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print("\n## Widths and forecast errors, median (max) over runs")
    for name, g in table.groupby("schedule", sort=False):
        def mm(col):
            v = g[col].to_numpy(float)
            v = v[np.isfinite(v)]
            return f"{np.median(v):.3g} ({np.max(v):.3g})" if v.size else "-"
        ok = (g["status"] == "ok").sum()
        within = (g["forecast_err"] <= WITHIN).sum()
        print(f"  {name:8s} ok {ok}/{len(g)}  A width {mm('A_w')}  B width {mm('B_w')}  C_mid width/C_mid "
              f"{mm('C_mid_w_rel')}  forecast err {mm('forecast_err')}  within {WITHIN}: {within}/{len(g)}")
    print("\n## The criteria per schedule (gain = mean of the last 4 evals - R0; fall after 10% of steps)")
    print(crit.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for name, g in crit.groupby("schedule", sort=False):
        per_seed = g.groupby("seed").apply(lambda s: int((s["status"] == "ok").sum()), include_groups=False)
        per_seed = {int(k): int(v) for k, v in per_seed.items()}
        print(f"  {name:8s} gain >= {GAIN}: {(g['gain'] >= GAIN).sum()}/{len(g)}; fall <= {FALL}: "
              f"{(g['worst_fall'] <= FALL).sum()}/{len(g)}; ok per seed: {per_seed}; "
              f"forecasts within {WITHIN}: {(g['forecast_err'] <= WITHIN).sum()}/{len(g)}")
    cols = [c for c in ("schedule", "level", "loss", "seed", "n_seeds", "rank", "status", "A", "A_lo", "A_hi", "B", "B_lo", "B_hi",
                        "C_mid", "A_common", "B_common", "tie_group") if c in arms[0].columns]
    print("\n## The leaderboard per schedule: every run, and every arm with two or more seeds (its seeds pooled)")
    print(pd.concat(arms, ignore_index=True)[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:
        write_csv(table.merge(crit, on=["schedule", "run", "forecast_err"]), args.csv)  # formula cells neutralised


if __name__ == "__main__":
    main()
