"""Stop an arm that cannot catch the leader: the one rule behind early stopping and pruning.

The paper's promise (arXiv 2510.13786 §1) is that a fit on part of a run predicts the rest.
So at each eval every live arm is fitted, and an arm stops when, at the chosen confidence,
it cannot catch the leader:

* on A (the default): the upper end of its interval on A lies below the lower end of the
  leader's, the leader being the arm with the highest lower end;
* with a target compute C*: the same, with the predicted reward at C* and its band.

Never before the bend.  Pruning that compares raw rewards at equal compute (median, ASHA)
kills the arms that start slowly but end higher: the paper's larger batches (§5, Table 1:
batch 2048 has C_mid 10,909 GPU-h against 2,542, and a higher A).  Here an arm can only be
stopped on A when its fit is usable: A is identified (`analysis.fit`: not on a bound, an
interval narrower than max_a_width) and the arm's last eval lies past its fitted C_mid -- and,
by default, past the upper end of the interval on C_mid.  The leader must be usable too.
On C*, an arm whose A is not identified may still be stopped when C* lies inside its data
(the prediction is then an interpolation, which does not depend on A).

Arms with several seeds are pooled conservatively: the arm's upper end is the highest of its
seeds', the leader's lower end the lowest of its seeds', and every seed must be usable.

    decisions = decide({"cispo": [fit_a], "dapo": [fit_b]}, StopRule(target_compute=None))
    decisions["dapo"].stop, decisions["dapo"].reason

Pure: fits in, decisions out.  The sweep's watcher (scalerl.launch.early_stop), the Optuna
pruner (analysis.pruning) and the simulator (analysis.simulate) all call `decide`.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from analysis.fit import FitOptions, FitResult

NAN = float("nan")
BASES = ("A", "target")


@dataclass(frozen=True)
class StopRule:
    """When an arm is out of the race.  A bad value raises ValueError naming the field."""

    level: float = FitOptions.level
    """Confidence: the level of the intervals compared (bootstrap, and profile for A)."""
    target_compute: float | None = None
    """C*: compare predicted reward at this compute instead of A; None compares A."""
    past_bend: str = "C_mid_hi"
    """How far past the bend an arm must be: "C_mid_hi" (the interval's upper end) or "C_mid"."""
    min_points: int = 8
    """Evals (step 0 included) an arm needs before it is fitted for a decision at all."""
    n_boot: int = 200
    """Bootstrap replicates of each decision's fit."""

    def __post_init__(self):
        if not (isinstance(self.level, numbers.Real) and 0.0 < self.level < 1.0):
            raise ValueError(f"level must lie in (0, 1), got {self.level!r}")
        if self.target_compute is not None and not (isinstance(self.target_compute, numbers.Real)
                                                    and self.target_compute > 0):
            raise ValueError(f"target_compute must be a compute > 0 or None, got {self.target_compute!r}")
        if self.past_bend not in ("C_mid_hi", "C_mid"):
            raise ValueError(f"past_bend must be 'C_mid_hi' or 'C_mid', got {self.past_bend!r}")
        for name, least in (("min_points", 3), ("n_boot", 20)):
            value = getattr(self, name)
            if not (isinstance(value, numbers.Integral) and value >= least):
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")

    @property
    def basis(self) -> str:
        return "A" if self.target_compute is None else "target"

    def fit_options(self, seed: int) -> FitOptions:
        """The fit each decision rests on: intervals at `level`, a bootstrap, the profile of A."""
        return FitOptions(level=self.level, n_boot=self.n_boot, seed=seed)


@dataclass(frozen=True)
class Decision:
    """One arm's verdict at one eval, with the numbers it rests on (written into stop.json)."""

    arm: str
    stop: bool
    reason: str
    basis: str = "A"
    leader: str | None = None
    value: float = NAN              # the arm's A (or predicted reward at C*)
    upper: float = NAN              # ... and the upper end of its interval
    leader_value: float = NAN
    leader_lower: float = NAN
    eligible: bool = False          # could be stopped at all (past the bend, identified)
    fits: tuple = field(default=(), repr=False)

    def record(self) -> dict:
        """JSON-ready: why, against whom, and the fit at the moment of the decision."""
        fit = self.fits[0] if self.fits else FitResult(status="fit_failed")
        return {"reason": self.reason, "basis": self.basis, "leader": self.leader,
                "value": _num(self.value), "upper": _num(self.upper), "leader_value": _num(self.leader_value),
                "leader_lower": _num(self.leader_lower), "fit": fit_record(fit), "n_seeds": len(self.fits)}


def fit_record(fit: FitResult) -> dict:
    """The fields of a fit that a stop record keeps (the fit at the moment of stopping)."""
    keys = ("status", "A", "A_lo", "A_hi", "A_profile_lo", "A_profile_hi", "B", "B_lo", "B_hi",
            "C_mid", "C_mid_lo", "C_mid_hi", "R0", "n_points", "last_compute", "level")
    return {k: _num(getattr(fit, k)) if k != "status" else fit.status for k in keys}


def _num(x):
    if isinstance(x, numbers.Integral):
        return int(x)
    return float(x) if x is not None and np.isfinite(x) else None


def past_bend(fit: FitResult, rule: StopRule) -> bool:
    """The arm's data reach past its fitted bend (C_mid, or the upper end of its interval)."""
    bend = fit.C_mid_hi if rule.past_bend == "C_mid_hi" and np.isfinite(fit.C_mid_hi) else fit.C_mid
    return bool(fit.fitted and np.isfinite(bend) and fit.last_compute >= bend)


def _a_bounds(fit: FitResult) -> tuple[float, float]:
    """The wider of the bootstrap and profile intervals on A: the conservative one."""
    lo = np.nanmin([fit.A_lo, fit.A_profile_lo]) if np.isfinite([fit.A_lo, fit.A_profile_lo]).any() else NAN
    hi = np.nanmax([fit.A_hi, fit.A_profile_hi]) if np.isfinite([fit.A_hi, fit.A_profile_hi]).any() else NAN
    return float(lo), float(hi)


def _target_bounds(fit: FitResult, compute: float, level: float) -> tuple[float, float, float]:
    lo, hi = fit.band(compute, level)
    return float(fit.predict(compute)), float(lo[0]), float(hi[0])


def arm_bounds(fits: list[FitResult], rule: StopRule) -> tuple[bool, float, float, float, str]:
    """(eligible, value, lower, upper, why not) of one arm, pooled over its seeds."""
    if not fits:
        return False, NAN, NAN, NAN, "no fit yet"
    rows = []
    for fit in fits:
        if rule.target_compute is None:
            if not fit.usable:
                return False, NAN, NAN, NAN, f"A not identified ({fit.status})"
            lo, hi = _a_bounds(fit)
            rows.append((fit.A, lo, hi))
        else:
            inside = fit.fitted and np.isfinite(fit.last_compute) and rule.target_compute <= fit.last_compute
            if not (fit.usable or inside):
                return False, NAN, NAN, NAN, f"prediction at C* not identified ({fit.status})"
            rows.append(_target_bounds(fit, rule.target_compute, rule.level))
        if not past_bend(fit, rule):
            return False, NAN, NAN, NAN, "not yet past the bend"
    value, lower, upper = np.array(rows, dtype=float).T
    if not (np.isfinite(lower).all() and np.isfinite(upper).all()):
        return False, NAN, NAN, NAN, "no interval (bootstrap failed)"
    return True, float(value.mean()), float(lower.min()), float(upper.max()), ""


def decide(arms: dict[str, list[FitResult]], rule: StopRule = StopRule()) -> dict[str, Decision]:
    """{arm: Decision} for the current fits of every arm (live or finished) of a sweep."""
    what = "A" if rule.target_compute is None else f"R(C*={rule.target_compute:.4g})"
    bounds = {arm: arm_bounds(list(fits), rule) for arm, fits in arms.items()}
    eligible = {arm: b for arm, b in bounds.items() if b[0]}
    leader = max(eligible, key=lambda a: eligible[a][2]) if eligible else None
    lead_value, lead_lower = (eligible[leader][1], eligible[leader][2]) if leader is not None else (NAN, NAN)
    out = {}
    for arm, (ok, value, _, upper, why) in bounds.items():
        common = dict(arm=arm, basis=rule.basis, leader=leader, value=value, upper=upper,
                      leader_value=lead_value, leader_lower=lead_lower, eligible=ok, fits=tuple(arms[arm]))
        if not ok:
            out[arm] = Decision(stop=False, reason=why, **common)
        elif arm == leader:
            out[arm] = Decision(stop=False, reason="leads", **common)
        elif upper < lead_lower:
            out[arm] = Decision(stop=True, reason=(
                f"cannot catch {leader}: {what} {value:.3f}, upper {100 * rule.level:.0f}% bound {upper:.3f}"
                f" < leader's lower bound {lead_lower:.3f}"), **common)
        else:
            out[arm] = Decision(stop=False, reason=f"still in the race (upper {upper:.3f} >= {lead_lower:.3f})",
                                **common)
    return out


STOP_COLUMNS = ("stop_step", "stop_compute", "stop_reason", "stop_leader", "stop_basis", "stop_value",
                "stop_upper", "stop_leader_lower", "stop_status", "stop_A", "stop_A_lo", "stop_A_hi", "stop_B",
                "stop_C_mid")


def with_stop_columns(board, records: dict):
    """The leaderboard plus, for runs a sweep stopped early, why and the fit at that moment.

    records: {run: stop record} (summary.json's `early_stop`).  Adds the STOP_COLUMNS and one
    note per stopped run; a board without stopped runs is returned unchanged.
    """
    if not records or board.empty:
        return board
    board = board.copy()
    text = ("stop_reason", "stop_leader", "stop_basis", "stop_status")
    for col in STOP_COLUMNS:
        board[col] = "" if col in text else NAN
    notes = list(board.attrs.get("notes", []))
    for i, run in board["run"].items():
        rec = records.get(run)
        if not rec:
            continue
        fit = rec.get("fit") or {}
        values = {"stop_step": rec.get("step"), "stop_compute": rec.get("compute"), "stop_reason": rec.get("reason"),
                  "stop_leader": rec.get("leader"), "stop_basis": rec.get("basis"), "stop_value": rec.get("value"),
                  "stop_upper": rec.get("upper"), "stop_leader_lower": rec.get("leader_lower"),
                  "stop_status": fit.get("status"), "stop_A": fit.get("A"), "stop_A_lo": fit.get("A_lo"),
                  "stop_A_hi": fit.get("A_hi"), "stop_B": fit.get("B"), "stop_C_mid": fit.get("C_mid")}
        for col, value in values.items():
            board.at[i, col] = ("" if value is None else str(value)) if col in text else (
                NAN if value is None else float(value))
        notes.append(f"{run} was stopped early at step {rec.get('step')}: {rec.get('reason')}")
    board.attrs["notes"] = notes
    return board
