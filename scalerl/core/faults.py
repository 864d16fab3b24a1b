"""Fail points: die with SIGKILL at a named point of a run, for the crash tests.

``SCALERL_FAILPOINT=<name>@<step>`` (or ``<name>`` for points without a step)
makes the process kill itself with SIGKILL the first time it reaches that point,
exactly as ``kill -9`` would at that instant: no handler, no flush, no cleanup.
The crash tests (``tests/test_faults.py``) choose kill points from a run's own
progress this way (during the step-0 eval, in the middle of a checkpoint save,
right after one, ...) instead of racing a timer. Unset, which it always is
outside those tests, a fail point costs one dictionary lookup.

Points: ``eval@S`` (held-out eval of step S done, its row not yet written),
``<file>.append@S`` / ``<file>.appended@S`` (before / after a JSONL row of
``metrics`` or ``steps``), ``<file>.torn@S`` (half of that row written, then
killed), ``checkpoint.written@S`` (temporary file complete, not yet renamed),
``checkpoint.saved@S`` (renamed, older ones not yet pruned), ``run.finished``
(training done, summary.json not yet written), ``sweep.launched`` (the arms'
launch records written, no arm started) and ``sweep.leaderboard`` (every arm
done, leaderboard not yet written).
"""
from __future__ import annotations

import os
import signal

ENV = "SCALERL_FAILPOINT"


def armed(name: str, step: int | None = None) -> bool:
    spec = os.environ.get(ENV)
    return bool(spec) and spec == (name if step is None else f"{name}@{step}")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def failpoint(name: str, step: int | None = None) -> None:
    """SIGKILL this process if ``SCALERL_FAILPOINT`` names this point (and step)."""
    if armed(name, step):
        die()


def torn_write(name: str, step: int | None, fd: int, data: bytes) -> bool:
    """If armed: write the first half of ``data`` to ``fd``, make it durable and die (a kill mid-write)."""
    if not armed(name, step):
        return False
    os.write(fd, data[: len(data) // 2])
    os.fsync(fd)
    die()
    return True  # not reached
