"""The power-law baseline R(C) = A - D / C^B (paper §1), fitted like the sigmoid.

The paper shows why it is only a baseline: on the 8B run it gave A = 1.0 fitted on
1.5k-50k GPU-h and 0.74 on 5k-50k, where the sigmoid gave 0.645 both times (truth ~0.65).
It shares `prepare_curve` and FitOptions (r0, min_compute, fit_until, min_points) with
the sigmoid, so both see exactly the same points; the other options do not apply.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from analysis.fit import NAN, CurveError, FitOptions, _signal, prepare_curve
from analysis.models import power_law

B_GRID = np.geomspace(0.01, 5.0, 60)


@dataclass(frozen=True)
class PowerLawFit:
    status: str                      # ok | A_unidentified (A at 1) | flat | decreasing | too_few_points | fit_failed
    A: float = NAN
    D: float = NAN                   # in the data's compute units: R = A - D / C^B (may be inf)
    B: float = NAN
    sse: float = NAN
    n_points: int = 0
    reason: str = ""
    scale: float = 1.0               # the last fitted compute
    D_scaled: float = NAN            # D / scale^B: finite where D overflows; what `predict` uses

    @property
    def fitted(self):
        return bool(np.isfinite(self.A))

    def predict(self, compute):
        # in units of the last fitted compute: D in FLOPs (1e15^B) overflows a float
        return power_law(np.asarray(compute, dtype=float) / self.scale, self.A, self.D_scaled, self.B)


def _linear_ad(z, y):
    """Least-squares (A, D) of y ~ A - D z for fixed z = x^-B, with A <= 1 and D >= 0."""
    zc, yc = z - z.mean(), y - y.mean()
    D = max(-float(zc @ yc) / max(float(zc @ zc), 1e-300), 0.0)
    A = float(y.mean() + D * z.mean())
    if A > 1.0:        # clip A, then the best D for A = 1
        A, D = 1.0, max(float((1.0 - y) @ z) / max(float(z @ z), 1e-300), 0.0)
    return A, D


def fit_power_law(compute, reward, options: FitOptions = FitOptions(), *, epoch=None):
    """Fit A - D / C^B on the same points as `fit_sigmoid` with `options`; never raises on data."""
    try:
        curve = prepare_curve(compute, reward, options, epoch=epoch)
    except CurveError as err:
        return PowerLawFit(status=err.status, reason=str(err))
    if curve.x.size < options.min_points:
        return PowerLawFit(status="too_few_points", n_points=int(curve.x.size),
                           reason=f"{curve.x.size} points, need {options.min_points}")
    signal, why = _signal(curve.y, curve.R0)      # the sigmoid's own test, on the same points
    if signal:
        return PowerLawFit(status=signal, n_points=int(curve.x.size), reason=why)
    scale = float(curve.x[-1])
    x, y = curve.x / scale, curve.y
    best = None
    for B in B_GRID:                                   # A, D are linear for fixed B
        A, D = _linear_ad(x ** -B, y)
        sse = float(np.sum((y - (A - D * x ** -B)) ** 2))
        if best is None or sse < best[3]:
            best = (A, D, B, sse)

    def residual(theta):
        A, D, b = theta
        return A - D * x ** -np.exp(b) - y

    A0, D0, B0, sse0 = best
    try:
        sol = least_squares(residual, (A0, D0, np.log(B0)), method="trf",
                            bounds=((-np.inf, 0.0, np.log(1e-3)), (1.0, np.inf, np.log(50.0))))
        if 2 * sol.cost < sse0:
            (A0, D0, b), sse0 = sol.x, 2 * sol.cost
            B0 = float(np.exp(b))
    except ValueError:
        pass
    if not np.isfinite(sse0):
        return PowerLawFit(status="fit_failed", reason="no finite fit")
    status = "A_unidentified" if A0 > 1.0 - 1e-3 else "ok"
    with np.errstate(over="ignore"):                   # D in FLOP units can overflow: inf
        D = float(D0 * np.float64(scale) ** B0)        # numpy: inf, where a Python float raises
    return PowerLawFit(status=status, A=float(A0), D=D, B=float(B0), scale=scale, D_scaled=float(D0),
                       sse=float(sse0), n_points=int(x.size),
                       reason="A sits at its upper bound 1.0" if status != "ok" else "")
