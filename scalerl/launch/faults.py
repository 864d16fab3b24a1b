"""Crash points: die with SIGKILL at a named point of a run, for the crash tests.

``SCALERL_FAILPOINT=<point>@<step>`` (or ``<point>`` for points without a step) makes the process
kill itself with SIGKILL the first time it reaches that point, exactly as ``kill -9`` would at that
instant: no handler, no flush, no cleanup. The crash tests (``tests/test_faults.py``) choose kill
points from a run's own progress this way (during a checkpoint save, right after one, with half a
row written, ...) instead of racing a timer.

The runtime holds no crash hooks. Each point is a seam: a call the run makes anyway (a JSONL
append, a checkpoint's rename, the summary's write, ...), listed in ``POINTS``. ``arm``, called
once at every scalerl process's start (``app.register``), wraps that one function when the variable
names its point, in its module and wherever it was imported by name. Unset, which it always is
outside those tests, nothing is wrapped: the cost is one environment lookup per process.

Points (docs/testing.md): ``<file>.append@S`` / ``<file>.appended@S`` (before / after a JSONL row of
``metrics`` or ``steps``), ``<file>.torn@S`` (half of that row written, then killed), ``eval@S``
(step S's held-out eval done, its row not yet written: the instant of ``metrics.append@S``, since
nothing durable happens between the two), ``checkpoint.written@S`` (the temporary file complete,
not yet renamed), ``checkpoint.saved@S`` (renamed, older ones not yet pruned), ``run.finished``
(training done, summary.json not yet written), ``sweep.launched`` (the arms' launch records
written, no arm started) and ``sweep.leaderboard`` (every arm done, leaderboard not yet written).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scalerl.core.jsonio import encode_row

ENV = "SCALERL_FAILPOINT"


@dataclass(frozen=True)
class Seam:
    target: str
    """``module:qualname`` of the function wrapped, where it is defined."""
    when: str
    """``before`` or ``after`` the call."""
    at: Callable[..., tuple[str, int | None] | None]
    """The call's arguments, by name -> (point, step) it is, or None when this call is no point."""
    act: Callable[..., None] | None = None
    """Done before dying (``before`` only): a torn row's half."""


def _row(kind: str) -> Callable:
    return lambda self, row, **_: (f"{self.path.stem}.{kind}", row.get("step"))


def _checkpoint(point: str) -> Callable:
    def at(src, dst, **_):
        m = re.fullmatch(r"step_(\d+)\.pt", Path(dst).name)
        return (point, int(m.group(1))) if m and Path(dst).parent.name == "checkpoints" else None
    return at


def _tear(self, row, **_) -> None:
    """Half of the row ``JsonlFile.append`` would write, durable (a kill in the middle of the write)."""
    data = encode_row(row)
    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, data[: len(data) // 2])
    os.fsync(fd)


APPEND = "scalerl.core.jsonio:JsonlFile.append"
POINTS: dict[str, Seam] = {
    "<file>.append": Seam(APPEND, "before", _row("append")),
    "<file>.torn": Seam(APPEND, "before", _row("torn"), act=_tear),
    "<file>.appended": Seam(APPEND, "after", _row("appended")),
    "eval": Seam(APPEND, "before", lambda self, row, **_: ("eval", row.get("step")) if self.path.stem == "metrics" else None),
    "checkpoint.written": Seam("os:replace", "before", _checkpoint("checkpoint.written")),
    "checkpoint.saved": Seam("os:replace", "after", _checkpoint("checkpoint.saved")),
    "run.finished": Seam("scalerl.core.jsonio:write_json_atomic", "before", lambda path, obj, **_: ("run.finished", None)
                         if Path(path).name == "summary.json" and obj.get("status") in ("done", "stopped_early") else None),
    "sweep.launched": Seam("scalerl.launch.local_pool:arm_context", "before", lambda **_: ("sweep.launched", None)),
    "sweep.leaderboard": Seam("scalerl.launch.sweeping:_report", "before", lambda **_: ("sweep.leaderboard", None)),
}


def parse(spec: str) -> tuple[str, int | None, Seam]:
    """``<point>[@<step>]`` -> (point, step, its seam); a ValueError names the known points."""
    point, _, step = spec.partition("@")
    seam = POINTS.get(point) or (POINTS.get(f"<file>.{point.rpartition('.')[2]}") if "." in point else None)
    if seam is None or (step and not step.isdigit()):
        raise ValueError(f"{ENV}={spec}: not a crash point (<point>[@<step>], points: {', '.join(POINTS)})")
    return point, int(step) if step else None, seam


def resolve(target: str) -> tuple[object, str, Callable]:
    """(owner, attribute name, function) of ``module:qualname``."""
    module, _, qualname = target.partition(":")
    owner = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name, getattr(owner, name)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(env=os.environ) -> None:
    """Wrap the seam of the point ``SCALERL_FAILPOINT`` names (nothing when it is unset); idempotent."""
    spec = env.get(ENV)
    if not spec:
        return
    point, step, seam = parse(spec)
    owner, name, original = resolve(seam.target)
    if getattr(original, "_crash_point", None) == spec:
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        hit = seam.at(**bound.arguments) == (point, step)
        if hit and seam.when == "before":
            if seam.act is not None:
                seam.act(**bound.arguments)
            die()
        result = original(*args, **kwargs)
        if hit:
            die()
        return result

    wrapper._crash_point = spec
    setattr(owner, name, wrapper)
    for module in list(sys.modules.values()):  # where it was imported by name (``from x import f``)
        if module is not owner and getattr(module, "__dict__", {}).get(name) is original:
            setattr(module, name, wrapper)
