"""How sure we are: bootstrap, profile likelihood for A, and the seed-to-seed spread.

The paper reports no interval at all; it states a margin of ±0.02 on A from three seeds
that agreed within ±0.015 (paper §1, §4).  We give three complementary answers:

* bootstrap: eval noise.  A moving-block residual bootstrap by default (FitOptions.boot
  "block"): refit on fitted + residuals resampled in contiguous blocks, so noise that is
  correlated in time (a real run's policy wobbles by +-0.02-0.03 over several evals,
  docs/embedded.md) keeps its correlation in every replicate; the block length comes from the
  residuals' lag-1 autocorrelation (`block_length`) and is 1, a plain residual bootstrap,
  when they are independent.  When R0 is itself a measured eval (step 0), R0 is shifted
  by one resampled residual too, since it carries the same noise.  `kind="residual"`
  resamples residuals one by one; `kind="pairs"` resamples (compute, reward) points.  All
  replicates are refitted together by `solver.lm_batch`, warm-started at the estimate.
* forecast noise: what a forecast is compared with is itself a few noisy evals, so a
  forecast interval adds to each replicate the mean of `n` consecutive resampled
  residuals (`future_noise`): with correlated noise that mean hardly shrinks with n.
* profile likelihood for A: fix A on a grid, refit (B, C_mid), and keep the A values whose
  SSE rise stays under the F(1, n-3) quantile.  It sees curvature the bootstrap can miss
  when A runs to its bound.
* seeds: training randomness, which neither of the above can see.  `seed_interval` is a
  t-interval on the mean of per-seed estimates.
All functions work in the solver's scaled log coordinates (see `analysis.solver`).
"""
from __future__ import annotations

import os

import numpy as np
from scipy import stats

from analysis.solver import B_GRID, grid_search, lm_batch, log_cmid_grid, shape

N_PARAMS = 3   # A, B, C_mid; R0 is fixed, not fitted (paper §1)
BOOT_BYTES = 128   # peak bytes per replicate and point of `bootstrap` (97 measured with tracemalloc, 31-301 points)


def memory_bytes():
    """This machine's physical memory in bytes (16 GiB where the OS will not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 16 << 30


def boot_limit(n_points):
    """The most bootstrap replicates of an `n_points` curve whose arrays fit in half the memory."""
    return int(memory_bytes() // 2 // (BOOT_BYTES * max(int(n_points), 1)))


def percentile_interval(samples, level):
    """(lo, hi) percentile interval of finite samples; (nan, nan) when there are none."""
    x = np.asarray(samples, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(x, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def noise_rho(resid):
    """Lag-1 correlation of the eval noise, in [0, 0.9]: the larger of the residuals' own and
    the one read off their first differences.  A fitted curve soaks up the slow part of a
    wobble, which lowers the residuals' own correlation, but what it soaks up is smooth and
    all but vanishes from the differences; for an AR(1) with correlation rho, the
    differences' lag-1 correlation is -(1 - rho) / 2.
    >>> noise_rho([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])          # alternating: no memory
    0.0
    """
    resid = np.asarray(resid, dtype=float)
    d = np.diff(resid)
    from_diffs = 1.0 + 2.0 * lag1(d) if d.size >= 3 else 0.0
    return float(np.clip(max(lag1(resid), from_diffs), 0.0, 0.9))


def scaled_residuals(resid, from_diffs=True):
    """Residuals centred and inflated for the 3 fitted parameters, so that resampled noise
    has the variance of the true noise rather than of the (smaller) fitted residuals.

    With noise correlated in time, a smooth curve absorbs more of it than its 3 parameters
    alone would: each parameter takes about (1 + rho) / (1 - rho) points' worth of an AR(1)
    with lag-1 correlation rho, so the degrees of freedom are n - 3 (1 + rho) / (1 - rho),
    kept at n / 4 or more.  For independent residuals (rho = 0) this is n - 3.  With
    `from_diffs`, rho is `noise_rho`'s and the sd is at least the one the residuals'
    differences show (var(diff) = 2 sd^2 (1 - rho)), which the fit cannot have absorbed.
    """
    resid = np.asarray(resid, dtype=float)
    n = resid.size
    if n == 0:
        return resid
    rho = noise_rho(resid) if from_diffs else float(np.clip(lag1(resid), 0.0, 0.9))
    dof = max(n - N_PARAMS * (1 + rho) / (1 - rho), n / 4, 1)
    e = (resid - resid.mean()) * np.sqrt(n / dof)
    sd = float(e.std())
    if from_diffs and n >= 3 and sd > 0:
        sd_diff = float(np.std(np.diff(resid))) / np.sqrt(2 * (1 - rho))
        e = e * max(sd_diff / sd, 1.0)
    return e


def lag1(resid):
    """Lag-1 autocorrelation of a residual series (0 for fewer than 3 points).
    >>> lag1([1.0, -1.0, 1.0, -1.0])        # lagged products -1 -1 -1, over the sum of squares 4
    -0.75
    """
    r = np.asarray(resid, dtype=float)
    if r.size < 3:
        return 0.0
    r = r - r.mean()
    denom = float(r @ r)
    return float(r[1:] @ r[:-1] / denom) if denom > 0 else 0.0


def block_length(resid):
    """Block length of the moving-block bootstrap for `resid`.

    Hall, Horowitz and Jing's order for a variance, L = (3n/2)^(1/3) (2 rho / (1 - rho^2))^(2/3),
    with rho the lag-1 autocorrelation of an AR(1) read off the residuals; 1 when rho is
    within 2 / sqrt(n) of 0 (independent noise: a plain residual bootstrap), at most n / 3 so
    a replicate still mixes three blocks.
    >>> block_length(np.sin(np.arange(60) / 3.0))                      # smooth: the cap, 60 / 3
    20
    >>> block_length(np.random.default_rng(0).normal(size=60))        # white noise
    1
    """
    n = np.size(resid)
    rho = min(lag1(resid), 0.95)
    if n < 6 or rho <= 2 / np.sqrt(n):
        return 1
    length = (1.5 * n) ** (1 / 3) * (2 * rho / (1 - rho**2)) ** (2 / 3)
    return int(np.clip(round(length), 1, n // 3))


def block_length_for(resid):
    """`block_length` with the noise correlation of `noise_rho` (residuals and their differences)."""
    n = np.size(resid)
    rho = noise_rho(resid)
    if n < 6 or rho <= 2 / np.sqrt(n):
        return 1
    return int(np.clip(round((1.5 * n) ** (1 / 3) * (2 * rho / (1 - rho**2)) ** (2 / 3)), 1, n // 3))


def block_indices(n, length, n_boot, rng):
    """(n_boot, n) indices into a series of n: contiguous blocks of `length` from random starts."""
    if length <= 1:
        return rng.integers(0, n, size=(n_boot, n))
    n_blocks = -(-n // length)
    starts = rng.integers(0, n - length + 1, size=(n_boot, n_blocks, 1))
    return (starts + np.arange(length)).reshape(n_boot, -1)[:, :n]


def future_noise(resid, n, n_boot, rng):
    """(n_boot,) means of `n` consecutive scaled residuals from random starts: the noise of an
    observed mean of `n` evals, as correlated as the residuals are (0 when there are none)."""
    e = scaled_residuals(resid)
    if e.size == 0:
        return np.zeros(n_boot)
    n = int(min(max(n, 1), e.size))
    windows = np.convolve(e, np.ones(n) / n, mode="valid")     # every run of n consecutive residuals
    return windows[rng.integers(0, windows.size, size=n_boot)]


def bootstrap(lx, y, r0, theta, *, n_boot, rng, kind, perturb_r0=True,
              a_max=1.0, a_fixed=None):
    """Refit `n_boot` resampled curves; returns (n_boot, 4) rows of (A, log B, log C_mid, R0).

    theta = (A, log B, log C_mid) is the point estimate, used as every replicate's start.
    kind: "block" (moving blocks of residuals), "residual" (one by one) or "pairs".
    """
    A, b, c = theta
    n = y.size
    s, _ = shape(b, c, lx)
    fitted = r0 + (A - r0) * s
    e = scaled_residuals(y - fitted, from_diffs=kind == "block")
    length = block_length_for(e) if kind == "block" else 1
    idx = block_indices(n, length, n_boot, rng)
    if kind == "pairs":
        lx_star, y_star = lx[idx], y[idx]
    else:
        lx_star, y_star = lx, fitted + e[idx]
    r0_star = np.full(n_boot, float(r0))
    if perturb_r0:
        r0_star = r0_star + e[rng.integers(0, n, size=n_boot)]
    r0_star = np.minimum(r0_star, a_max - 1e-6)
    d_fixed = None if a_fixed is None else np.clip(a_fixed - r0_star, 0.0, a_max - r0_star)
    d, bb, cc, _ = lm_batch(lx_star, y_star - r0_star[:, None], a_max - r0_star,
                            np.full(n_boot, b), np.full(n_boot, c), d_fixed=d_fixed)
    return np.column_stack([r0_star + d, bb, cc, r0_star])


def _profile_sse(lx, yc, dmax, d_values):
    """Minimum SSE over (B, C_mid) for each fixed A - R0 in `d_values`."""
    d_values = np.asarray(d_values, dtype=float)
    _, b0, c0, _ = grid_search(lx, yc, dmax, B_GRID[::2], log_cmid_grid(lx, 30), d_fixed=d_values)
    yc_rep = np.broadcast_to(yc, (d_values.size, yc.size))
    return lm_batch(lx, yc_rep, dmax, b0, c0, d_fixed=d_values)[3]


def _crossing(path, sse, threshold):
    """First crossing of `threshold` walking along `path` (which starts at the estimate).

    Returns (value, i): the interpolated A between path[i-1] and path[i], or
    (path[-1], None) when the profile never crosses, i.e. the interval reaches the bound.
    """
    for i in range(1, path.size):
        if sse[i] > threshold:
            s0, s1 = sse[i - 1], sse[i]
            t = (threshold - s0) / (s1 - s0) if s1 > s0 else 1.0
            return float(path[i - 1] + t * (path[i] - path[i - 1])), i
    return float(path[-1]), None


def profile_a(lx, y, r0, a_hat, sse_hat, *, level, a_max=1.0, n_grid=81, n_refine=17):
    """Profile-likelihood interval (lo, hi) for A; an end that never crosses is the bound.

    Coarse grid over [R0, a_max], then a fine grid inside the bracket of each crossing.
    """
    dof = y.size - N_PARAMS
    if dof < 1 or not np.isfinite(a_hat):
        return float("nan"), float("nan")
    yc, dmax = y - r0, a_max - r0
    a = np.linspace(r0, a_max, n_grid)
    sse = _profile_sse(lx, yc, dmax, a - r0)
    sse_min = min(float(sse_hat), float(sse.min()))
    threshold = sse_min * (1.0 + stats.f.ppf(level, 1, dof) / dof)   # SSE rise <= s^2 F
    ends = []
    for order in (np.flatnonzero(a < a_hat)[::-1], np.flatnonzero(a > a_hat)):
        path = np.concatenate([[a_hat], a[order]])          # from the estimate outwards
        path_sse = np.concatenate([[sse_min], sse[order]])
        value, i = _crossing(path, path_sse, threshold)
        if i is not None:
            fine = np.linspace(path[i - 1], path[i], n_refine)
            fine_sse = _profile_sse(lx, yc, dmax, fine - r0)
            fine_sse[0] = min(fine_sse[0], path_sse[i - 1])
            value, _ = _crossing(fine, fine_sse, threshold)
        ends.append(value)
    return ends[0], ends[1]


def pooled_sd(groups):
    """(sd, dof) of the seed-to-seed spread pooled over arms: sum (k-1) s^2 / sum (k-1).

    Training noise is taken to be alike across arms, as the paper's single ±0.02 margin
    assumes; pooling turns 2-3 seeds per arm into a usable number of degrees of freedom.
    >>> [round(v, 4) for v in pooled_sd([[0.60, 0.62], [0.50, 0.51, 0.52]])]  # (2e-4 + 2e-4) / 3
    [0.0115, 3]
    """
    groups = [np.asarray(g, dtype=float)[np.isfinite(g)] for g in groups]
    groups = [g for g in groups if g.size >= 2]
    dof = sum(g.size - 1 for g in groups)
    if dof == 0:
        return float("nan"), 0
    return float(np.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)), int(dof)


def seed_interval(values, level, pooled=None):
    """(mean, sd, lo, hi): t-interval on the mean of per-seed estimates.

    sd is these seeds' own spread.  The interval uses `pooled` = (sd, dof) from
    `pooled_sd` when given, else the seeds' own sd with k - 1 dof; with one seed and no
    pooled spread, lo and hi are nan.
    >>> [round(v, 4) for v in seed_interval([0.60, 0.61, 0.62], 0.95)]   # t(0.975, 2) = 4.303
    [0.61, 0.01, 0.5852, 0.6348]
    """
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return (float("nan"),) * 4
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size >= 2 else float("nan")
    spread, dof = pooled if pooled is not None and pooled[1] >= 1 else (sd, x.size - 1)
    if dof < 1 or not np.isfinite(spread):
        return mean, sd, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, dof) * spread / np.sqrt(x.size))
    return mean, sd, mean - half, mean + half
