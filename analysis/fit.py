"""Fit the ScaleRL sigmoid to one reward-vs-compute curve; return a frozen FitResult.

    result = fit_sigmoid(compute, reward)            # R0 = the step-0 (compute 0) eval
    print(result.report())
    quick = fit_sigmoid(compute, reward, FitOptions(n_boot=0, method="paper_grid"))

Every fit setting lives on one frozen FitOptions, validated when it is built; variants
are `dataclasses.replace(options, ...)`.  Methods (paper §1 for the procedure it
reproduces), one function each in METHODS:
* "closed_form" (default): for fixed (B, C_mid), A enters linearly, so its least-squares
  value is one regression, clipped to [R0, 1].  A vectorized grid over (log B, log C_mid)
  finds the basin; scipy.optimize.least_squares polishes (A, B, C_mid) within bounds.
* "paper_grid": the paper's grid over A in {0.450..0.800} and 100 C_mid values, with a
  least-squares fit of B in each cell (the paper's curve_fit; all cells at once, `solver.fit_log_b`).  The paper's C_mid grid is [100, 40000] GPU-h, and 40k
  GPU-h is the scale of its fit windows (16k ablations .. 50k for the 8B run).  We map
  40000 to the last fitted compute, so the 100 values span 1/400 .. 1x of the fitted
  window in any compute unit.  A C_mid beyond the data is then unreachable, as it mostly
  was for the paper; such a fit lands on the grid's edge and is flagged A_unidentified.

The fitter never raises on bad data: every outcome is a `status` (see STATUSES).  A bad
setting raises ValueError, naming it, when its FitOptions is built.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

import numpy as np

from analysis import solver
from analysis.models import guess, sigmoid
from analysis.uncertainty import bootstrap, percentile_interval, profile_a

STATUSES = {
    "ok": "usable fit",
    "nan_dropped": "usable fit; non-finite points were dropped first",
    "A_unidentified": "A sits on a bound, the run ends before C_mid, or its interval is too wide",
    "too_few_points": "fewer than min_points finite points above the compute threshold",
    "flat": "no gain over R0 above the eval noise (constant, all-zero or pure-noise curve)",
    "decreasing": "reward ends significantly below R0",
    "fit_failed": "the optimizer found no finite fit (or the inputs were malformed)",
    "run_failed": "the run itself failed (summary.json); not fitted",
}
USABLE = ("ok", "nan_dropped")
BOOTSTRAPS = ("block", "residual", "pairs")
PAPER_A_GRID = np.round(np.arange(0.450, 0.8001, 0.005), 3)     # 71 values (paper §1)
PAPER_CMID_GRID = np.linspace(100.0, 40000.0, 100)              # GPU-h (paper §1)
PAPER_CMID_TOP = 40000.0        # mapped onto the last fitted compute (see above)
AUTO_FRACTION, AUTO_EPOCH_CAP = 0.10, 0.25
BOUND_TOL = 1e-3
NAN = float("nan")


@dataclass(frozen=True)
class FitOptions:
    """Every setting of a fit, each default written here once; checked when built.

    Variants are `dataclasses.replace(options, ...)`, e.g. the tie rule's refit with a
    fixed A and no bootstrap.  A bad value raises ValueError naming the option.
    """

    r0: float | None = None
    """Fixed R0 for every curve; None: the eval at compute 0 (step 0), else the first point."""
    min_compute: float | str | None = "auto"
    """Fit only compute >= this: "auto" (about one epoch, §1), "<p>%" of the run, a number or None."""
    fit_until: float | None = None
    """Fit only compute <= this, to extrapolate past it; None fits every point."""
    method: str = "closed_form"
    """How the point estimate is found: a key of METHODS."""
    n_boot: int = 500
    """Bootstrap replicates; 0 (or 1: an interval needs two) skips the bootstrap."""
    boot: str = "block"
    """Bootstrap kind: "block" (fitted curve + residuals resampled in blocks, for noise correlated
    in time; independent residuals give blocks of 1), "residual" (one by one) or "pairs" (points)."""
    profile: bool = True
    """Also compute the profile-likelihood interval of A."""
    level: float = 0.95
    """Level of every interval, in (0, 1)."""
    max_a_width: float = 0.1
    """An interval on A wider than this makes A unidentified (status A_unidentified)."""
    a_fixed: float | None = None
    """Fix A to this value and fit B and C_mid only (the paper's tie rule, arXiv 2510.13786 §1)."""
    min_points: int = 5
    """Fewer finite points above min_compute than this gives status too_few_points."""
    seed: int = 0
    """Bootstrap seed; fit_runs derives each run's seed from it and the run's name."""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"FitOptions.method must be one of {list(METHODS)}, got {self.method!r}")
        if self.boot not in BOOTSTRAPS:
            raise ValueError(f"FitOptions.boot must be one of {list(BOOTSTRAPS)}, got {self.boot!r}")
        if not (isinstance(self.level, numbers.Real) and 0.0 < self.level < 1.0):
            raise ValueError(f"FitOptions.level must lie in (0, 1), got {self.level!r}")
        if not (isinstance(self.max_a_width, numbers.Real) and self.max_a_width > 0):
            raise ValueError(f"FitOptions.max_a_width must be > 0, got {self.max_a_width!r}")
        for name, least in (("n_boot", 0), ("min_points", 1)):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Integral) and value >= least):
                raise ValueError(f"FitOptions.{name} must be an integer >= {least}, got {value!r}")
        if not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"FitOptions.seed must be an integer, got {self.seed!r}")
        for name in ("r0", "fit_until", "a_fixed"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, numbers.Real):
                raise ValueError(f"FitOptions.{name} must be a number or None, got {value!r}")
        try:                  # the grammar is resolve_min_compute's; fail here, not once per run
            resolve_min_compute(self.min_compute, np.ones(1))
        except (TypeError, ValueError):
            raise ValueError(f"FitOptions.min_compute must be 'auto', '<p>%', a number or None,"
                             f" got {self.min_compute!r}") from None


@dataclass(frozen=True, eq=False)
class FitResult:
    """Parameters, intervals (at `level`), status and the fitted points of one curve."""

    status: str
    method: str = FitOptions.method
    A: float = NAN
    B: float = NAN
    C_mid: float = NAN
    R0: float = NAN
    A_lo: float = NAN
    A_hi: float = NAN
    B_lo: float = NAN
    B_hi: float = NAN
    C_mid_lo: float = NAN
    C_mid_hi: float = NAN
    A_profile_lo: float = NAN
    A_profile_hi: float = NAN
    sse: float = NAN
    n_points: int = 0
    n_dropped: int = 0
    min_compute: float = NAN
    fit_until: float = NAN
    last_compute: float = NAN        # last *fitted* compute
    level: float = FitOptions.level
    r0_source: str = ""
    reasons: tuple = ()
    flags: tuple = ()
    compute: np.ndarray = field(default_factory=lambda: np.empty(0))
    reward: np.ndarray = field(default_factory=lambda: np.empty(0))
    boot: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))   # A, B, C_mid, R0

    @property
    def usable(self):
        return self.status in USABLE

    @property
    def fitted(self):
        """Whether there are parameters at all (usable or A_unidentified)."""
        return bool(np.isfinite(self.A))

    @property
    def rmse(self):
        return float(np.sqrt(self.sse / self.n_points)) if self.n_points else NAN

    def predict(self, compute):
        return sigmoid(compute, self.A, self.B, self.C_mid, self.R0)

    def band(self, compute, level=None):
        """Pointwise bootstrap interval (lo, hi) of the predicted reward at `compute`."""
        level = self.level if level is None else level
        C = np.atleast_1d(np.asarray(compute, dtype=float))
        if self.boot.shape[0] < 2:
            nan = np.full(C.shape, NAN)
            return nan, nan.copy()
        A, B, Cm, R0 = (self.boot[:, k:k + 1] for k in range(4))
        curves = sigmoid(C[None, :], A, B, Cm, R0)
        lo, hi = np.nanpercentile(curves, [50 * (1 - level), 50 * (1 + level)], axis=0)
        return lo, hi

    def report(self):
        pct = f"{100 * self.level:.0f}%"
        lines = [f"ScaleRL sigmoid fit ({self.method}): status {self.status}"
                 f" - {STATUSES.get(self.status, '')}"]
        lines += [f"  why: {r}" for r in self.reasons]
        if self.fitted:
            lines.append(f"  R0    = {self.R0:.4f} ({self.r0_source})")
            if self.usable:
                lines.append(f"  A     = {self.A:.4f}  [{self.A_lo:.4f}, {self.A_hi:.4f}] {pct} bootstrap,"
                             f" [{self.A_profile_lo:.4f}, {self.A_profile_hi:.4f}] profile")
            else:   # never print a confident number that sits on a bound
                lines.append(f"  A     = not identified (A_unidentified); the fit reached {self.A:.3f},"
                             f" {pct} interval [{self.A_lo:.3f}, {self.A_hi:.3f}]")
            lines.append(f"  B     = {self.B:.3f}  [{self.B_lo:.3f}, {self.B_hi:.3f}]")
            lines.append(f"  C_mid = {self.C_mid:.4g}  [{self.C_mid_lo:.4g}, {self.C_mid_hi:.4g}]")
            lines.append(f"  fit on {self.n_points} points with compute in [{self.min_compute:.4g},"
                         f" {self.last_compute:.4g}], RMSE {self.rmse:.4f}")
        if self.flags:
            lines.append(f"  flags: {', '.join(self.flags)}")
        return "\n".join(lines)

    def to_row(self):
        """The leaderboard's per-run columns."""
        keys = ("status", "method", "A", "A_lo", "A_hi", "A_profile_lo", "A_profile_hi", "B",
                "B_lo", "B_hi", "C_mid", "C_mid_lo", "C_mid_hi", "R0", "r0_source", "n_points",
                "n_dropped", "min_compute", "fit_until", "sse")
        row = {k: getattr(self, k) for k in keys}
        row.update(rmse=self.rmse, fit_last_compute=self.last_compute,
                   flags=";".join(self.flags), reasons="; ".join(self.reasons))
        return row


def resolve_min_compute(min_compute, compute, epoch=None):
    """Absolute compute threshold from "auto", "<p>%", a number, or None (no threshold).

    "auto" is the paper's choice (§1: drop the first ~1.5k GPU-h, about one epoch, which
    rises almost linearly): the compute where `epoch` first reaches 1, capped at 25% of
    the run so a long first epoch cannot eat the curve; 10% of the run without epochs.
    Fractions are of the last compute given: a fit that stops early (fit_until) passes only the
    points it has seen, so its threshold is what a forecast made at that compute would use.
    """
    last = float(np.max(compute)) if np.size(compute) else 0.0
    if min_compute is None:
        return 0.0
    if isinstance(min_compute, str):
        text = min_compute.strip().lower()
        if text == "auto":
            if epoch is not None:
                past = np.asarray(compute)[np.asarray(epoch) >= 1.0]
                if past.size:
                    return float(min(past.min(), AUTO_EPOCH_CAP * last))
            return AUTO_FRACTION * last
        if text.endswith("%"):
            return float(text[:-1]) / 100.0 * last
        return float(text)
    return float(min_compute)


def _eval_noise(y):
    """Per-eval noise sd from successive differences (robust MAD), so it needs no model."""
    diffs = np.diff(y)
    if diffs.size == 0:
        return 0.0
    return 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / np.sqrt(2)


def _signal(y, r0):
    """'flat', 'decreasing' or None, comparing the tail with R0 against the eval noise.

    The tail mean of k points minus a single R0 eval has sd noise * sqrt(1 + 1/k).
    """
    k = int(min(5, max(1, y.size // 3)))
    gain = float(np.mean(y[-k:]) - r0)
    noise = _eval_noise(y)
    threshold = max(3.0 * noise * np.sqrt(1 + 1 / k), 1e-9)
    if gain < -threshold:
        return "decreasing", f"tail mean is {-gain:.4f} below R0 (noise {noise:.4f})"
    if abs(gain) <= threshold:
        return "flat", f"gain over R0 is {gain:+.4f}, within 3 sd of the eval noise ({threshold:.4f})"
    return None, ""


def _drop_after_peak(y):
    """The reward fell well below its best rolling mean: the paper's GSPO diverged mid-run."""
    if y.size < 10:
        return False
    rolled = np.convolve(y, np.ones(5) / 5, mode="valid")
    return bool(rolled.max() - rolled[-1] > max(6 * _eval_noise(y) / np.sqrt(5), 0.02))


@dataclass(frozen=True)
class Curve:
    """One run's points after cleaning: what every fitter in this package starts from."""

    x: np.ndarray            # fitted compute, ascending, > 0 and >= threshold
    y: np.ndarray            # reward at x
    R0: float
    r0_source: str           # "given" | "step-0 eval" | "first point"
    threshold: float         # min_compute actually used
    n_dropped: int           # non-finite points dropped
    flags: tuple


class CurveError(ValueError):
    """Malformed input or nothing left to fit; carries the status to report."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status


# ---------------------------------------------------------------- methods (the point estimate)
# Each takes the cleaned Curve, lx = log(x / last x), yc = y - R0 and d_fixed = A - R0 when A
# is fixed (else None), and returns ((A - R0, log B, log(C_mid / last x), SSE) or None, reasons).

def closed_form(curve, lx, yc, d_fixed):
    """A in closed form on a (log B, log C_mid) grid, then least_squares on all three."""
    dmax = 1.0 - curve.R0
    d0, b0, c0, _ = solver.grid_search(lx, yc, dmax, d_fixed=d_fixed)
    if d_fixed is not None:
        d0, b0, c0 = d_fixed, float(b0[0]), float(c0[0])
    return solver.polish(lx, yc, dmax, d0, b0, c0, d_fixed=d_fixed), ()


def paper_grid(curve, lx, yc, d_fixed):
    """The paper's A x C_mid grid with curve_fit for B (§1).  A fixed A has no grid: closed_form."""
    if d_fixed is not None:
        return closed_form(curve, lx, yc, d_fixed)
    R0, reasons = curve.R0, []
    a_values = PAPER_A_GRID[PAPER_A_GRID >= R0]
    c_values = np.log(PAPER_CMID_GRID / PAPER_CMID_TOP)      # scale = last fitted compute
    best = solver.paper_grid(lx, yc, R0, a_values, c_values, b0=guess(curve.x, curve.y, R0)[1])
    if best is not None and np.isclose(best[0] + R0, [a_values.min(), a_values.max()]).any():
        reasons.append(f"A at the edge of the paper grid ({best[0] + R0:.3f})")
    if best is not None and np.isclose(best[2], c_values[-1]):
        reasons.append("C_mid at the top of the paper grid: the run may end before C_mid")
    return best, tuple(reasons)


METHODS = {"closed_form": closed_form, "paper_grid": paper_grid}


def prepare_curve(compute, reward, options: FitOptions = FitOptions(), *, epoch=None):
    """Cut at options.fit_until, drop non-finite points, fix R0, cut at the compute threshold.

    R0 (paper §1: not fitted; the natural choice is the step-0 eval): options.r0 when
    given, else the eval at compute 0, else the first point (flagged r0_from_first_point).
    """
    flags = []
    try:
        C = np.asarray(compute, dtype=float).ravel()
        R = np.asarray(reward, dtype=float).ravel()
        E = None if epoch is None else np.asarray(epoch, dtype=float).ravel()
    except (TypeError, ValueError) as err:
        raise CurveError("fit_failed", f"bad input: {err}") from None
    if C.size != R.size or (E is not None and E.size != C.size):
        raise CurveError("fit_failed", "compute, reward and epoch differ in length")
    if options.fit_until is not None:
        # A forecast at compute C knows the evals up to C and nothing else: the cut comes first, so
        # its points, R0, flags, threshold and so its intervals are those of the run truncated at C
        # (docs/analysis.md, "Forecasts"). A point without a finite compute cannot be placed before C.
        seen = np.isfinite(C) & (C <= options.fit_until)
        C, R, E = C[seen], R[seen], None if E is None else E[seen]
    finite = np.isfinite(C) & np.isfinite(R)
    n_dropped = int((~finite).sum())
    if n_dropped:
        flags.append("nan_dropped")
    order = np.argsort(C[finite], kind="stable")
    C, R = C[finite][order], R[finite][order]
    E = None if E is None else E[finite][order]
    if options.r0 is not None and np.isfinite(options.r0):
        R0, r0_source = float(options.r0), "given"
    elif np.any(C == 0):
        R0, r0_source = float(R[C == 0][0]), "step-0 eval"
    elif C.size:
        R0, r0_source = float(R[0]), "first point"
        flags.append("r0_from_first_point")
    else:
        raise CurveError("too_few_points", "no finite points")
    # The threshold is resolved on the points seen (up to fit_until), never on the run's end: a live
    # forecast, or the early-stopping watcher, cannot know where a run will end.
    positive = C > 0
    threshold = resolve_min_compute(options.min_compute, C[positive], None if E is None else E[positive])
    keep = positive & (C >= threshold * (1 - 1e-12))      # an eval at the threshold stays in
    return Curve(C[keep], R[keep], R0, r0_source, threshold, n_dropped, tuple(flags))


def fit_sigmoid(compute, reward, options: FitOptions = FitOptions(), *, epoch=None):
    """Fit R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) with R0 fixed; never raises on data.

    options: every setting (FitOptions), validated when it was built.
    epoch:   per-point epoch, for min_compute="auto".
    """
    method = options.method
    try:
        curve = prepare_curve(compute, reward, options, epoch=epoch)
    except CurveError as err:
        return FitResult(status=err.status, method=method, reasons=(str(err),))
    x, y, R0, r0_source, threshold = curve.x, curve.y, curve.R0, curve.r0_source, curve.threshold
    flags, n_dropped, level = list(curve.flags), curve.n_dropped, options.level
    common = dict(method=method, R0=R0, r0_source=r0_source, n_points=int(x.size),
                  n_dropped=n_dropped, min_compute=threshold, level=level,
                  fit_until=NAN if options.fit_until is None else float(options.fit_until),
                  last_compute=float(x[-1]) if x.size else NAN, compute=x, reward=y)

    if x.size < options.min_points:
        return FitResult(status="too_few_points", flags=tuple(flags), **common,
                         reasons=(f"{x.size} points with compute >= {threshold:.4g},"
                                  f" need {options.min_points}",))
    signal, why = _signal(y, R0)
    if signal is None and R0 >= 1.0 - BOUND_TOL:
        signal, why = "flat", "R0 is already at the ceiling 1.0"
    if signal:
        return FitResult(status=signal, reasons=(why,), flags=tuple(flags), **common)
    if _drop_after_peak(y):
        flags.append("drop_after_peak")

    # ------------------------------------------------------------- point estimate
    scale = float(x[-1])
    lx, yc = np.log(x / scale), y - R0
    d_fixed = None if options.a_fixed is None else float(np.clip(options.a_fixed - R0, 0.0, 1.0 - R0))
    best, why = METHODS[method](curve, lx, yc, d_fixed)
    reasons = list(why)
    if best is None or not np.all(np.isfinite(best)):
        return FitResult(status="fit_failed", reasons=("no finite fit found",), flags=tuple(flags), **common)
    d, b, c, sse = best
    A, B, C_mid = R0 + d, float(np.exp(b)), float(np.exp(c) * scale)
    if d_fixed is not None:
        flags.append("A_fixed")

    # ------------------------------------------------------------- uncertainty
    rng = np.random.default_rng(options.seed)
    boot_rows = np.empty((0, 4))
    if options.n_boot > 1:
        draws = bootstrap(lx, y, R0, (A, b, c), n_boot=int(options.n_boot), rng=rng,
                          kind=options.boot, perturb_r0=r0_source == "step-0 eval",
                          a_fixed=options.a_fixed)
        boot_rows = np.column_stack([draws[:, 0], np.exp(draws[:, 1]),
                                     np.exp(draws[:, 2]) * scale, draws[:, 3]])
    A_lo, A_hi = percentile_interval(boot_rows[:, 0], level)
    B_lo, B_hi = percentile_interval(boot_rows[:, 1], level)
    Cm_lo, Cm_hi = percentile_interval(boot_rows[:, 2], level)
    P_lo, P_hi = (profile_a(lx, y, R0, A, sse, level=level) if options.profile and d_fixed is None
                  else (NAN, NAN))

    # ------------------------------------------------------------- identifiability (paper §1)
    if d_fixed is None:
        if A - R0 < BOUND_TOL:
            reasons.append(f"A sits at its lower bound R0 = {R0:.3f}")
        if 1.0 - A < BOUND_TOL:
            reasons.append("A sits at its upper bound 1.0")
        if x[-1] < C_mid:
            reasons.append(f"the run ends (C = {x[-1]:.4g}) before the fitted C_mid = {C_mid:.4g}")
        width = np.nanmax([A_hi - A_lo, P_hi - P_lo, 0.0])
        if width > options.max_a_width:
            reasons.append(f"the {100 * level:.0f}% interval on A is {width:.3f} wide"
                           f" (> {options.max_a_width})")
    if not 1.01 * solver.B_MIN < B < 0.99 * solver.B_MAX:
        flags.append("B_at_bound")
    status = "A_unidentified" if reasons else ("nan_dropped" if n_dropped else "ok")
    return FitResult(status=status, A=float(A), B=B, C_mid=C_mid, A_lo=A_lo, A_hi=A_hi,
                     B_lo=B_lo, B_hi=B_hi, C_mid_lo=Cm_lo, C_mid_hi=Cm_hi, A_profile_lo=P_lo,
                     A_profile_hi=P_hi, sse=float(sse), reasons=tuple(reasons),
                     flags=tuple(flags), boot=boot_rows, **common)


def fit_until(compute, reward, until, options: FitOptions = FitOptions(), *, epoch=None):
    """Fit only the points with compute <= `until`; predict the rest with `.predict`."""
    return fit_sigmoid(compute, reward, replace(options, fit_until=until), epoch=epoch)
