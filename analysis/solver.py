"""Least-squares engines for the ScaleRL sigmoid, in scaled log coordinates.

Every routine here works on one curve already cleaned and cut by `analysis.fit`:

    lx = log(C / scale)        fitted compute, scaled so the last point sits at 0
    yc = R - R0                reward above the fixed R0
    d  = A - R0  in [0, dmax]  with dmax = 1 - R0, so A in [R0, 1]
    b  = log B,  c = log(C_mid / scale)

so that yc ~ d * s(b, c) with s = 1 / (1 + (C_mid / C)^B) = expit(-B (c - lx)).

Why these coordinates: for fixed (B, C_mid) the model is linear in d, so the best d is a
one-line regression clipped to its bounds, and the search is two-dimensional (closed_form).
Logs keep B > 0 and C_mid > 0 without extra constraints, and scaling makes the same code
work for FLOPs (1e18) and GPU-hours (1e4).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

B_MIN, B_MAX = 1e-3, 50.0                      # B > 0 (paper §1); 50 is already a step
LOG_B_BOUNDS = (np.log(B_MIN), np.log(B_MAX))
B_GRID = np.log(np.geomspace(0.1, 12.0, 40))    # paper Table 1 has B in 1.09..2.44
_TINY = 1e-300


def log_cmid_bounds(lx):
    """C_mid may lie from 1/1000 of the first fitted compute to 10^4 times the last."""
    return float(lx.min() - np.log(1e3)), float(np.log(1e4))


def log_cmid_grid(lx, n=60):
    """Search grid for log C_mid: a tenth of the first fitted compute to 20x the last."""
    return np.linspace(lx.min() - np.log(10.0), np.log(20.0), n)


def shape(b, c, lx):
    """s = expit(-u) and u = B (c - lx), broadcast over any leading axes."""
    u = np.exp(b) * (c - lx)
    return expit(-u), u


def closed_form_d(s, yc, dmax):
    """Least-squares A - R0 for fixed shape s, clipped to [0, dmax].

    The SSE is a convex parabola in d, so clipping the unconstrained optimum gives the
    constrained one.  Sums run over the last axis.
    """
    Ss = np.einsum("...n,...n->...", s, s)
    Sy = np.einsum("...n,...n->...", s, yc)
    return np.clip(Sy / np.maximum(Ss, _TINY), 0.0, dmax)


def sse_of(d, b, c, lx, yc):
    s, _ = shape(b, c, lx)
    r = yc - np.asarray(d)[..., None] * s
    return np.einsum("...n,...n->...", r, r)


# ---------------------------------------------------------------- closed_form grid
def grid_search(lx, yc, dmax, b_grid=B_GRID, c_grid=None, d_fixed=None):
    """Best (d, b, c, sse) over a (log B, log C_mid) grid, vectorized.

    d is solved in closed form in every cell unless `d_fixed` is given; an array of
    k fixed values returns k best cells at once (used by the profile of A and the
    tie-rule refit).
    """
    c_grid = log_cmid_grid(lx) if c_grid is None else c_grid
    s, _ = shape(b_grid[:, None, None], c_grid[None, :, None], lx)   # (nB, nC, n)
    Ss = np.einsum("ijn,ijn->ij", s, s)
    Sy = s @ yc                                                       # (nB, nC)
    Syy = float(yc @ yc)
    if d_fixed is None:
        d = np.clip(Sy / np.maximum(Ss, _TINY), 0.0, dmax)
        sse = Syy - 2 * d * Sy + d * d * Ss
        i, j = np.unravel_index(np.argmin(sse), sse.shape)
        return float(d[i, j]), float(b_grid[i]), float(c_grid[j]), float(sse[i, j])
    d = np.atleast_1d(np.asarray(d_fixed, dtype=float))[:, None, None]
    sse = (Syy - 2 * d * Sy + d * d * Ss).reshape(d.shape[0], -1)    # (k, nB*nC)
    i, j = np.unravel_index(np.argmin(sse, axis=1), Ss.shape)
    return d[:, 0, 0], b_grid[i], c_grid[j], sse.min(axis=1)


def polish(lx, yc, dmax, d0, b0, c0, d_fixed=None):
    """Refine a grid cell with scipy.optimize.least_squares (trf, analytic Jacobian).

    Returns (d, b, c, sse) and never a worse point than the start.
    """
    c_lo, c_hi = log_cmid_bounds(lx)
    start = (float(d0), float(np.clip(b0, *LOG_B_BOUNDS)), float(np.clip(c0, c_lo, c_hi)))

    def residual(theta):
        d, b, c = (d_fixed, *theta) if d_fixed is not None else theta
        s, _ = shape(b, c, lx)
        return d * s - yc

    def jacobian(theta):
        d, b, c = (d_fixed, *theta) if d_fixed is not None else theta
        s, u = shape(b, c, lx)
        w = -d * s * (1 - s)
        cols = [w * u, w * np.exp(b)]
        return np.column_stack(cols if d_fixed is not None else [s, *cols])

    if d_fixed is None:
        x0, lb, ub = start, (0.0, LOG_B_BOUNDS[0], c_lo), (dmax, LOG_B_BOUNDS[1], c_hi)
    else:
        x0, lb, ub = start[1:], (LOG_B_BOUNDS[0], c_lo), (LOG_B_BOUNDS[1], c_hi)
    best = (d_fixed if d_fixed is not None else start[0], start[1], start[2])
    best_sse = float(sse_of(best[0], best[1], best[2], lx, yc))
    try:
        sol = least_squares(residual, x0, jac=jacobian, bounds=(lb, ub), method="trf",
                            x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=500)
    except (ValueError, np.linalg.LinAlgError):
        return (*best, best_sse)
    theta = (d_fixed, *sol.x) if d_fixed is not None else tuple(sol.x)
    sse = float(2 * sol.cost)
    if np.isfinite(sse) and sse <= best_sse:
        return (float(theta[0]), float(theta[1]), float(theta[2]), sse)
    return (*best, best_sse)


# ---------------------------------------------------------------- batched LM
def lm_batch(lx, yc, dmax, b, c, d_fixed=None, n_iter=100, rtol=1e-10):
    """Levenberg-Marquardt on many curves at once (bootstrap replicates, profile points).

    lx: (m, n) or (n,); yc: (m, n); dmax: scalar or (m,); b, c: (m,) starting points;
    d_fixed: None (d solved in closed form, variable projection) or (m,).
    Variable projection is exact here: at the optimal d the residual is orthogonal to s,
    so the gradient in (b, c) is -d * r . ds, which is what the Jacobian below gives.
    Returns (d, b, c, sse), each (m,).  One scipy call per replicate costs ~3 ms;
    this costs ~0.03 ms per replicate of 200 points.
    """
    yc = np.atleast_2d(yc)
    m = yc.shape[0]
    lx = np.broadcast_to(lx, yc.shape)
    dmax = np.broadcast_to(np.asarray(dmax, dtype=float), (m,)).copy()
    b, c = np.array(b, dtype=float), np.array(c, dtype=float)
    c_lo, c_hi = log_cmid_bounds(lx)
    fixed = None if d_fixed is None else np.broadcast_to(d_fixed, (m,)).astype(float)

    def evaluate(idx, b_, c_):
        s, _ = shape(b_[:, None], c_[:, None], lx[idx])
        d = closed_form_d(s, yc[idx], dmax[idx]) if fixed is None else fixed[idx]
        r = yc[idx] - d[:, None] * s
        return d, np.einsum("ij,ij->i", r, r)

    d, sse = evaluate(np.arange(m), b, c)
    lam = np.full(m, 1e-3)
    active = np.arange(m)
    for _ in range(n_iter):
        if active.size == 0:
            break
        s, u = shape(b[active, None], c[active, None], lx[active])   # (k, n)
        r = yc[active] - d[active, None] * s
        w = d[active, None] * s * (1 - s)              # dr/db = w u,  dr/dc = w B
        j1, j2 = w * u, w * np.exp(b[active])[:, None]
        if fixed is None:
            # Kaufman's variable-projection Jacobian: project out s, the direction the
            # closed-form d absorbs.  Without it the Gauss-Newton Hessian ignores that A
            # and C_mid trade off, and the iteration crawls along the valley.
            free = ((d[active] > 0) & (d[active] < dmax[active]))[:, None]
            ss = np.maximum(np.einsum("ij,ij->i", s, s), _TINY)[:, None]
            j1 = j1 - free * s * (np.einsum("ij,ij->i", s, j1)[:, None] / ss)
            j2 = j2 - free * s * (np.einsum("ij,ij->i", s, j2)[:, None] / ss)
        a11, a12, a22 = (np.einsum("ij,ij->i", p, q) for p, q in ((j1, j1), (j1, j2), (j2, j2)))
        g1, g2 = np.einsum("ij,ij->i", j1, r), np.einsum("ij,ij->i", j2, r)
        h11 = a11 * (1 + lam[active]) + 1e-12           # Marquardt: damp the diagonal
        h22 = a22 * (1 + lam[active]) + 1e-12
        det = h11 * h22 - a12 * a12
        det = np.where(np.abs(det) < _TINY, _TINY, det)
        step_b, step_c = -(h22 * g1 - a12 * g2) / det, -(h11 * g2 - a12 * g1) / det
        nb = np.clip(b[active] + step_b, *LOG_B_BOUNDS)
        nc = np.clip(c[active] + step_c, c_lo, c_hi)
        nd, nsse = evaluate(active, nb, nc)
        better = np.isfinite(nsse) & (nsse < sse[active])
        gain = np.where(better, sse[active] - nsse, 0.0)
        acc = active[better]
        b[acc], c[acc], d[acc], sse[acc] = nb[better], nc[better], nd[better], nsse[better]
        lam[active] = np.where(better, lam[active] / 3.0, lam[active] * 4.0)
        small = (gain <= rtol * (sse[active] + 1e-30)) & (np.maximum(abs(step_b), abs(step_c)) < 1e-7)
        done = (better & small) | (lam[active] > 1e12)
        active = active[~done]
    return d, b, c, sse


# ---------------------------------------------------------------- paper_grid
def paper_grid(lx, yc, r0, a_values, log_cmid_values, b0=1.0):
    """The paper's procedure (§1): grid over (A, C_mid), a least-squares fit of B in each cell.

    The paper fits B with curve_fit cell by cell (Levenberg-Marquardt, no bounds); here every
    cell's one-parameter fit runs at once (``fit_log_b``, the same method from the same start on
    log B, which keeps B > 0), 7,100 cells in a few array passes instead of 7,100 calls
    (`tests/analysis/test_solver.py` holds it to curve_fit cell by cell). Returns (d, b, c, sse)
    of the cell with the lowest SSE (the first in A-then-C_mid order on a tie), or None if no
    cell could be fitted.
    """
    a = np.asarray(a_values, dtype=float)
    a = a[a - r0 >= 0]                             # A in [R0, 1]
    if not a.size:
        return None
    d, c = (m.ravel() for m in np.meshgrid(a - r0, np.asarray(log_cmid_values, dtype=float), indexing="ij"))
    b = np.clip(fit_log_b(lx, yc, d, c, np.log(b0)), *LOG_B_BOUNDS)
    sse = sse_of(d, b[:, None], c[:, None], lx, yc)
    ok = np.flatnonzero(np.isfinite(sse))
    if not ok.size:
        return None
    i = ok[np.argmin(sse[ok])]
    return float(d[i]), float(b[i]), float(c[i]), float(sse[i])


def fit_log_b(lx, yc, d, c, b0, iters=200, tol=1.49012e-8):
    """Least-squares log B for each cell (d[k], c[k]) of yc ~ d * expit(-B (c - lx)), all cells at
    once: Levenberg-Marquardt on one parameter with the exact derivative (MINPACK's defaults: the
    damped Gauss-Newton step, lambda up 10x on a rejected step and down 10x on an accepted one,
    stopping at a relative step or SSE change below ``tol``). log B is clipped to [-20, 20] inside
    the model, as the per-cell fit did."""
    d, c = np.asarray(d, float)[:, None], np.asarray(c, float)[:, None]
    b = np.full(d.shape[0], float(b0))
    lam = np.full_like(b, 1e-3)
    active = np.ones_like(b, dtype=bool)

    def residual(bk, dk, ck):
        u = np.exp(np.clip(bk, -20.0, 20.0))[:, None] * (ck - lx)
        s = expit(-u)
        return dk * s - yc, s, u

    r, s, u = residual(b, d, c)
    sse = np.einsum("kn,kn->k", r, r)
    for _ in range(iters):
        k = np.flatnonzero(active)
        if not k.size:
            break
        inside = (np.abs(b[k]) < 20.0)[:, None]      # the clip's derivative is 0 outside
        jac = np.where(inside, -d[k] * s[k] * (1.0 - s[k]) * u[k], 0.0)
        g, h = np.einsum("kn,kn->k", jac, r[k]), np.einsum("kn,kn->k", jac, jac)
        step = -g / np.maximum(h * (1.0 + lam[k]), _TINY)
        r_new, s_new, u_new = residual(b[k] + step, d[k], c[k])
        sse_new = np.einsum("kn,kn->k", r_new, r_new)
        better = np.isfinite(sse_new) & (sse_new < sse[k])
        kb = k[better]
        small = (np.abs(step[better]) <= tol * (np.abs(b[kb]) + tol)) | (sse[kb] - sse_new[better] <= tol * sse[kb])
        b[kb] += step[better]
        r[kb], s[kb], u[kb], sse[kb] = r_new[better], s_new[better], u_new[better], sse_new[better]
        lam[kb] /= 10.0
        lam[k[~better]] *= 10.0
        done = np.zeros_like(b, dtype=bool)
        done[kb[small]] = True
        done[k[~better]] |= (lam[k[~better]] > 1e12) | (h[~better] == 0.0)
        active &= ~done
    return b
