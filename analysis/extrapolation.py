"""Does the fit predict what more compute gives?  Fit early, compare at the end.

Paper §1 checks this by eye (fit on half the budget, extrapolate to the full budget);
we put a number on it.  "Final reward" is the mean of the last `n_final` (default 3)
evals, and the prediction is the mean of the fitted curve at those same compute values:
averaging damps eval noise (sd ~0.004 per eval at 16k samples, ~0.0023 for three), and
comparing at the same points keeps a still-rising curve from biasing the comparison.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analysis.baseline import fit_power_law
from analysis.fit import FitOptions
from analysis.runs import curves, fit_runs, validate

N_FINAL = 3
WITHIN = 0.02          # paper §1: the ±0.02 margin on A, reused as "a good forecast"


def final_pair(fit, compute, reward, n_final=N_FINAL):
    """(predicted, observed) mean reward over the last `n_final` finite evals of a run."""
    C, R = np.asarray(compute, float), np.asarray(reward, float)
    ok = np.isfinite(C) & np.isfinite(R) & (C > 0)
    if not ok.any():
        return float("nan"), float("nan")
    order = np.argsort(C[ok])
    C, R = C[ok][order][-n_final:], R[ok][order][-n_final:]
    predicted = float(np.mean(fit.predict(C))) if fit.fitted else float("nan")
    return predicted, float(np.mean(R))


@dataclass(frozen=True, eq=False)
class ExtrapolationCheck:
    per_run: pd.DataFrame      # run, fraction, fit_until, status, pred_final, obs_final, abs_error, ...
    aggregate: dict            # n, mean/median/max abs error, fraction within 0.02, ...

    def report(self):
        a = self.aggregate
        lines = [f"extrapolation from the first {100 * a['fraction']:.0f}% of each run's compute"
                 f" to its last {a['n_final']} evals ({a['n']} runs with a prediction,"
                 f" {a['n_unidentified']} of them A_unidentified, {a['n_no_prediction']} without):"]
        if a["n"]:
            lines.append(f"  abs error: mean {a['mean_abs_error']:.4f}, median {a['median_abs_error']:.4f},"
                         f" 90th pct {a['p90_abs_error']:.4f}, max {a['max_abs_error']:.4f}")
            lines.append(f"  within {WITHIN}: {100 * a['frac_within']:.1f}% of runs"
                         f" (power-law baseline: {100 * a['frac_within_power_law']:.1f}%)")
        return "\n".join(lines)


def summarize(per_run, fraction, n_final=N_FINAL):
    """Aggregate error over runs that have both a prediction and an observation."""
    has = per_run[np.isfinite(per_run["abs_error"].to_numpy(float))]
    err = has["abs_error"].to_numpy(float)
    power = has["abs_error_power_law"].to_numpy(float)
    power = power[np.isfinite(power)]

    def stat(f, e):
        return float(f(e)) if e.size else float("nan")

    return {
        "fraction": float(fraction), "n_final": int(n_final), "n": int(err.size),
        "n_unidentified": int((has["status"] == "A_unidentified").sum()),
        "n_no_prediction": int(len(per_run) - len(has)),
        "mean_abs_error": stat(np.mean, err), "median_abs_error": stat(np.median, err),
        "p90_abs_error": stat(lambda e: np.percentile(e, 90), err), "max_abs_error": stat(np.max, err),
        "frac_within": stat(lambda e: np.mean(e <= WITHIN), err),
        "frac_within_power_law": stat(lambda e: np.mean(e <= WITHIN), power),
    }


def extrapolation_check(points, fraction=0.5, options: FitOptions = FitOptions(), *, n_final=N_FINAL):
    """Fit each run on its first `fraction` of compute; compare with its observed end.

    `fraction` sets each run's fit_until, so options.fit_until must be None.
    """
    if options.fit_until is not None:
        raise ValueError("extrapolation_check sets fit_until per run from `fraction`;"
                         f" leave FitOptions.fit_until as None (got {options.fit_until!r})")
    points = validate(points)
    data = curves(points)
    cut = {run: fraction * C.max() if C.size and C.max() > 0 else np.nan for run, (C, _) in data.items()}
    fits = {}
    for run, until in cut.items():        # each run has its own horizon
        subset = points[points["run"] == run]
        fits.update(fit_runs(subset, replace(options, fit_until=until)))
    rows = []
    for run, fit in fits.items():
        C, R = data[run]
        pred, obs = final_pair(fit, C, R, n_final)
        # the baseline sees exactly the sigmoid's points: same threshold, same horizon
        threshold = fit.min_compute if np.isfinite(fit.min_compute) else options.min_compute
        power = fit_power_law(C, R, replace(options, fit_until=cut[run], min_compute=threshold))
        pred_pl = final_pair(power, C, R, n_final)[0]
        rows.append({"run": run, "fraction": fraction, "fit_until": cut[run], "status": fit.status,
                     "pred_final": pred, "obs_final": obs, "abs_error": abs(pred - obs),
                     "A": fit.A, "B": fit.B, "C_mid": fit.C_mid, "last_compute": C.max() if C.size else np.nan,
                     "pred_final_power_law": pred_pl, "abs_error_power_law": abs(pred_pl - obs)})
    per_run = pd.DataFrame(rows, columns=[
        "run", "fraction", "fit_until", "status", "pred_final", "obs_final", "abs_error", "A", "B",
        "C_mid", "last_compute", "pred_final_power_law", "abs_error_power_law"])
    return ExtrapolationCheck(per_run, summarize(per_run, fraction, n_final))
