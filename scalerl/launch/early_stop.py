"""Early stopping inside a sweep (``hydra.sweeper.early_stop=true``; off by default).

While the launcher runs the arms, a watcher thread in the sweep's own process reads every
arm's ``metrics.jsonl``, fits each arm that has a new eval (the analysis layer's sigmoid,
arXiv 2510.13786 §1), and applies ``analysis.stopping.decide``: an arm stops when, at the
chosen confidence, it cannot catch the leader -- on A, or on the predicted reward at a
target compute C* (``hydra.sweeper.stop_rule.target_compute``).  Arms whose A is not
identified, or that are not yet past their bend, are never stopped.

Stopping is a file: the watcher writes ``<run_dir>/stop.json`` (why, against whom, and the
fit at that moment).  The training loop checks for it at every step boundary, checkpoints
and ends with status ``stopped_early``; ``summary.json`` keeps the record.  Because it is a
file on the run directory, it works the same for local arms and for SLURM jobs (whose run
directories live on the shared filesystem), and a relaunch sees it: a stopped arm is never
restarted (``rundir.arm_state``).  Delete ``stop.json`` and ``summary.json`` to resume one.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from scalerl.core.errors import ConfigError
from scalerl.core.jsonio import read_json, write_json_atomic
from scalerl.train.signals import STOP_REQUEST

FINISHED = ("done", "failed", "stopped_early")


@dataclass
class Curve:
    compute: list
    reward: list
    epoch: list
    step: int


def read_curve(run_dir: Path) -> Curve:
    """The arm's evals so far (step 0 first), from its metrics.jsonl, read by analysis's hardened
    reader (the one reader of metrics.jsonl; pandas comes with it, as with the fit below)."""
    from analysis.io import read_metrics

    rows = [r for r in read_metrics(Path(run_dir) / "metrics.jsonl")
            if r.get("pass_rate") is not None and r.get("compute") is not None]
    return Curve([float(r["compute"]) for r in rows], [float(r["pass_rate"]) for r in rows],
                 [float(r.get("epoch") or 0.0) for r in rows], int(rows[-1]["step"]) if rows else 0)


def finished(run_dir: Path) -> bool:
    status = (read_json(Path(run_dir) / "summary.json") or {}).get("status")
    return status in FINISHED or (Path(run_dir) / STOP_REQUEST).exists()


def request_stop(run_dir: Path, record: dict) -> None:
    """Ask the run in ``run_dir`` to stop for good at its next step boundary."""
    write_json_atomic(Path(run_dir) / STOP_REQUEST, {**record, "requested_at": time.time()})


def stop_rule(node, target_compute=None):
    """``hydra.sweeper.stop_rule`` as an analysis StopRule; a bad value names its key."""
    from analysis.stopping import StopRule

    fields = dict(node or {})
    if target_compute is not None:
        fields.setdefault("target_compute", target_compute)
    known = set(StopRule.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"hydra.sweeper.stop_rule.{unknown[0]}", f"unknown setting; known: {sorted(known)}")
    try:
        return StopRule(**{k: (float(v) if k == "target_compute" and v is not None else v) for k, v in fields.items()})
    except (TypeError, ValueError) as e:
        key = str(e).split(" ", 1)[0]
        raise ConfigError(f"hydra.sweeper.stop_rule.{key if key in known else ''}".rstrip("."), str(e)) from None


class Watcher:
    """Fits every arm of a sweep as its evals arrive and stops the ones out of the race.

    ``groups`` maps an arm's key (its ``arm_hash``: seeds of one recipe are one arm) to its
    run directories.  ``check()`` is one pass, usable without the thread (tests, replays).
    """

    def __init__(self, groups: dict[str, list[Path]], rule, *, poll_s: float = 5.0, log=print):
        self.groups = {k: [Path(d) for d in dirs] for k, dirs in groups.items()}
        self.rule, self.poll_s, self.log = rule, poll_s, log
        self.fits: dict[Path, tuple[int, object]] = {}
        self.stopped: dict[str, dict] = {}
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _fit(self, run_dir: Path):
        from analysis.fit import fit_sigmoid
        from analysis.runs import run_seed

        curve = read_curve(run_dir)
        if len(curve.compute) < self.rule.min_points:
            return None, curve
        cached = self.fits.get(run_dir)
        if cached is None or cached[0] != len(curve.compute):
            fit = fit_sigmoid(curve.compute, curve.reward, self.rule.fit_options(run_seed(run_dir.name, 0)),
                              epoch=curve.epoch)
            self.fits[run_dir] = (len(curve.compute), fit)
        return self.fits[run_dir][1], curve

    def check(self) -> dict:
        """One pass: fit what changed, decide, write stop requests; returns {arm: Decision}."""
        from analysis.stopping import decide

        fits, curves = {}, {}
        for key, dirs in self.groups.items():
            results = [self._fit(d) for d in dirs]
            fits[key] = [f for f, _ in results if f is not None]
            curves[key] = [c for _, c in results]
        decisions = decide(fits, self.rule)
        for key, decision in decisions.items():
            live = [d for d in self.groups[key] if not finished(d)]
            if not decision.stop or not live or key in self.stopped:
                continue
            last = max(curves[key], key=lambda c: c.step)
            record = {**decision.record(), "step": last.step, "compute": last.compute[-1] if last.compute else None,
                      "rule": asdict(self.rule)}
            for d in live:
                request_stop(d, record)
            self.stopped[key] = record
            self.log(f"[scalerl] early stop: {', '.join(d.name for d in live)} at step {last.step}: {decision.reason}")
        return decisions

    def _loop(self) -> None:
        while not self._halt.wait(self.poll_s):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - a failed check must never take the sweep down
                self.log(f"[scalerl] early stop: check failed ({type(e).__name__}: {e}); will retry")

    def start(self) -> "Watcher":
        self._thread = threading.Thread(target=self._loop, name="scalerl-early-stop", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def race_order(arms: list, key=lambda arm: arm.arm_hash or arm.name) -> list:
    """The launch order under early stopping: every arm's first seed, then every arm's second, ...

    The rule judges an arm against a leader, so rivals must run side by side. In the study's own
    order (all seeds of one arm, then the next arm) the first arms finish before any rival has a
    fit, and nothing can be stopped; interleaved, one seed of each arm settles the race and the
    other seeds of a stopped arm are never started (their stop.json is read before the warm start).

    >>> race_order(["a0", "a1", "a2", "b0", "b1", "b2", "c0"], key=lambda s: s[0])
    ['a0', 'b0', 'c0', 'a1', 'b1', 'a2', 'b2']
    """
    groups: dict[str, list] = {}
    for arm in arms:
        groups.setdefault(key(arm), []).append(arm)
    rounds = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(rounds) for g in groups.values() if i < len(g)]


def arm_labels(overrides: list[list[str]]) -> list[str]:
    """Each run's arm as the watcher's lines and stop records name it: its overrides less the seed, the
    study and those every run shares (the sweep's own settings).

    >>> arm_labels([["length.max_new_tokens=48", "seed=0", "logger=none"], ["length.max_new_tokens=56", "seed=0", "logger=none"]])
    ['length.max_new_tokens=48', 'length.max_new_tokens=56']
    """
    shared = set.intersection(*map(set, overrides)) if overrides else set()
    return [" ".join(o for o in run if o not in shared and not o.startswith(("seed=", "study="))) for run in overrides]


@contextmanager
def watching(sweeper, arms):
    """Watch ``arms`` (the sweep's planned arms) while the block runs, if early stopping is on."""
    if not getattr(sweeper, "early_stop", False):
        yield None
        return
    rule = stop_rule(getattr(sweeper, "stop_rule", None))
    groups: dict[str, list[Path]] = {}
    for arm in arms:
        groups.setdefault(arm.arm_hash or arm.name, []).append(arm.run_dir)
    labels = dict(zip([arm.arm_hash or arm.name for arm in arms], arm_labels([arm.overrides for arm in arms])))
    if len(set(labels.values())) == len(labels) and all(labels.values()):  # named by what sets them apart
        groups = {labels[key]: dirs for key, dirs in groups.items()}
    what = "A" if rule.target_compute is None else f"predicted reward at C*={rule.target_compute:.4g}"
    print(f"[scalerl] early stopping on: an arm stops when the upper {100 * rule.level:.0f}% bound of its "
          f"{what} falls below the leader's lower bound (only past its bend, only with A identified)")
    watcher = Watcher(groups, rule, poll_s=float(getattr(sweeper, "poll_s", 5.0))).start()
    try:
        yield watcher
    finally:
        watcher.close()
        try:
            watcher.check()     # the last evals may settle an arm that is still running elsewhere
        except Exception as e:  # noqa: BLE001 - never lose the sweep's results over a check
            print(f"[scalerl] early stop: last check failed ({type(e).__name__}: {e})")
