"""Does the fit predict what more compute gives?  Fit early, compare at the end.

Paper §1 checks this by eye (fit on half the budget, extrapolate to the full budget);
we put a number on it.  "Final reward" is the mean of the last `n_final` (default 3)
evals, and the prediction is the mean of the fitted curve at those same compute values:
averaging damps eval noise (sd ~0.004 per eval at 16k samples, ~0.0023 for three), and
comparing at the same points keeps a still-rising curve from biasing the comparison.
Every forecast carries its interval (`final_band`), and says how far past the fitted compute
it reaches (`beyond`: last compute over fit_until), since a sigmoid extrapolated far past its
data can promise more than the task allows.  The interval is a prediction interval for the
observed value, not a confidence interval for the curve: each bootstrap replicate's curve
(block bootstrap, analysis.uncertainty) is averaged over the same points, plus the mean of
`n_final` consecutive resampled residuals, since the observed end is itself a few evals of
a policy whose pass rate wobbles in time (on real runs the curve's own interval missed every
observed end; docs/embedded.md), widened by Student's t for the few points a short run's half has
(a smooth curve of 7 points otherwise claimed +-0.001).  `covered` says whether the observed
value lies inside it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from analysis.baseline import fit_power_law
from analysis.fit import FitOptions
from analysis.models import sigmoid
from analysis.runs import curves, fit_runs, points_table
from analysis.uncertainty import N_PARAMS, future_noise, percentile_interval

N_FINAL = 3
WITHIN = 0.02          # paper §1: the ±0.02 margin on A, reused as "a good forecast"


def _final_points(compute, reward, n_final):
    """The last `n_final` evals with finite compute > 0 and finite reward, compute-sorted."""
    C, R = np.asarray(compute, float), np.asarray(reward, float)
    ok = np.isfinite(C) & np.isfinite(R) & (C > 0)
    order = np.argsort(C[ok])
    return C[ok][order][-n_final:], R[ok][order][-n_final:]


def final_pair(fit, compute, reward, n_final=N_FINAL):
    """(predicted, observed) mean reward over the last `n_final` finite evals of a run."""
    C, R = _final_points(compute, reward, n_final)
    if not C.size:
        return float("nan"), float("nan")
    predicted = float(np.mean(fit.predict(C))) if fit.fitted else float("nan")
    return predicted, float(np.mean(R))


def final_band(fit, compute, reward, n_final=N_FINAL, level=None, *, noise_seed=0):
    """(lo, hi) prediction interval of the observed mean of the last `n_final` evals: each
    bootstrap replicate's curve is averaged over those evals' compute, the mean of `n_final`
    consecutive resampled residuals of the fit is added (the observed value's own noise,
    correlated in time as the residuals are), then the percentiles are taken."""
    C, _ = _final_points(compute, reward, n_final)
    if not fit.fitted or C.size == 0 or fit.boot.shape[0] < 2:
        return float("nan"), float("nan")
    A, B, Cm, R0 = (fit.boot[:, k:k + 1] for k in range(4))
    means = np.nanmean(sigmoid(C[None, :], A, B, Cm, R0), axis=1)
    resid = fit.reward - fit.predict(fit.compute)
    means = means + future_noise(resid, C.size, means.size, np.random.default_rng(noise_seed))
    level = fit.level if level is None else level
    lo, hi = percentile_interval(means, level)
    # The percentiles treat the noise the residuals show as known. From a handful of points (a
    # half-compute fit of a short run has 6-8) it is an estimate with n - 3 degrees of freedom, so
    # the interval is widened about the forecast by Student's t over the normal quantile, the
    # textbook prediction interval's factor (1.4 at 4 degrees of freedom, 1.03 at 80 points).
    centre = float(np.mean(fit.predict(C)))
    dof = max(fit.n_points - N_PARAMS, 1)
    q = 0.5 + level / 2
    widen = float(stats.t.ppf(q, dof) / stats.norm.ppf(q))
    return centre - widen * (centre - lo), centre + widen * (hi - centre)


@dataclass(frozen=True, eq=False)
class ExtrapolationCheck:
    per_run: pd.DataFrame      # run, fraction, fit_until, status, pred_final[_lo, _hi], obs_final, covered, ...
    aggregate: dict            # n, mean/median/max abs error, fraction within 0.02, coverage, ...
    level: float = 0.95        # of the forecast intervals

    def report(self, max_rows=40):
        a = self.aggregate
        lines = [f"extrapolation from the first {100 * a['fraction']:.0f}% of each run's compute"
                 f" to its last {a['n_final']} evals ({a['n']} runs with a prediction,"
                 f" {a['n_unidentified']} of them A_unidentified, {a['n_no_prediction']} without):"]
        has = self.per_run[np.isfinite(self.per_run["pred_final"].to_numpy(float))]
        for row in has.head(max_rows).itertuples():
            band = (f" [{row.pred_final_lo:.3f}, {row.pred_final_hi:.3f}]" if np.isfinite(row.pred_final_lo)
                    else " [no interval]")
            lines.append(f"  {row.run}: predicted {row.pred_final:.3f}{band}, observed {row.obs_final:.3f}"
                         f" ({row.beyond:.2g}x beyond the fitted compute; {row.status})")
        if a["n"]:
            lines.append(f"  abs error: mean {a['mean_abs_error']:.4f}, median {a['median_abs_error']:.4f},"
                         f" 90th pct {a['p90_abs_error']:.4f}, max {a['max_abs_error']:.4f}")
            lines.append(f"  within {WITHIN}: {100 * a['frac_within']:.1f}% of runs"
                         f" (power-law baseline: {100 * a['frac_within_power_law']:.1f}%)")
        if a.get("n_interval"):
            lines.append(f"  the {100 * self.level:.0f}% forecast interval covers the observed value on"
                         f" {a['n_covered']} of {a['n_interval']} runs ({100 * a['coverage']:.0f}%)")
        return "\n".join(lines)


def summarize(per_run, fraction, n_final=N_FINAL):
    """Aggregate error over runs that have both a prediction and an observation."""
    has = per_run[np.isfinite(per_run["abs_error"].to_numpy(float))]
    err = has["abs_error"].to_numpy(float)
    power = has["abs_error_power_law"].to_numpy(float)
    power = power[np.isfinite(power)]
    flags = has["covered"] if "covered" in has.columns else pd.Series(dtype=float)
    covered = flags.dropna().to_numpy(dtype=bool)

    def stat(f, e):
        return float(f(e)) if e.size else float("nan")

    return {
        "fraction": float(fraction), "n_final": int(n_final), "n": int(err.size),
        "n_unidentified": int((has["status"] == "A_unidentified").sum()),
        "n_no_prediction": int(len(per_run) - len(has)),
        "mean_abs_error": stat(np.mean, err), "median_abs_error": stat(np.median, err),
        "p90_abs_error": stat(lambda e: np.percentile(e, 90), err), "max_abs_error": stat(np.max, err),
        "frac_within": stat(lambda e: np.mean(e <= WITHIN), err),
        "n_interval": int(covered.size), "n_covered": int(covered.sum()),
        "coverage": stat(np.mean, covered),
        "frac_within_power_law": stat(lambda e: np.mean(e <= WITHIN), power),
    }


def extrapolation_check(points, fraction=0.5, options: FitOptions = FitOptions(), *, n_final=N_FINAL):
    """Fit each run on its first `fraction` of compute; compare with its observed end.

    `fraction` sets each run's fit_until, so options.fit_until must be None.
    """
    if options.fit_until is not None:
        raise ValueError("extrapolation_check sets fit_until per run from `fraction`;"
                         f" leave FitOptions.fit_until as None (got {options.fit_until!r})")
    points = points_table(points)
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
        lo, hi = final_band(fit, C, R, n_final)
        covered = bool(lo <= obs <= hi) if np.isfinite(lo) and np.isfinite(obs) else np.nan
        last = C.max() if C.size else np.nan
        rows.append({"run": run, "fraction": fraction, "fit_until": cut[run], "status": fit.status,
                     "pred_final": pred, "pred_final_lo": lo, "pred_final_hi": hi, "obs_final": obs,
                     "covered": covered,
                     "abs_error": abs(pred - obs), "beyond": last / cut[run] if cut[run] > 0 else np.nan,
                     "A": fit.A if fit.usable else np.nan, "B": fit.B, "C_mid": fit.C_mid, "last_compute": last,
                     "status_power_law": power.status, "pred_final_power_law": pred_pl,
                     "abs_error_power_law": abs(pred_pl - obs)})
    per_run = pd.DataFrame(rows, columns=[
        "run", "fraction", "fit_until", "status", "pred_final", "pred_final_lo", "pred_final_hi", "obs_final",
        "covered", "abs_error", "beyond", "A", "B", "C_mid", "last_compute", "status_power_law", "pred_final_power_law",
        "abs_error_power_law"])
    return ExtrapolationCheck(per_run, summarize(per_run, fraction, n_final), options.level)
