"""Is the process that wrote a run's ``progress.json`` still alive?

A run records who trains it: ``pid``, ``host`` and ``pid_start`` (the process
start time, so a reused pid is not mistaken for the trainer). On the same host
that settles it; for another host (a SLURM node) only the heartbeat can tell,
and the caller falls back to it.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None without /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return [] if Path("/proc/self/stat").exists() else None
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), else None."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def identity() -> dict:
    """This process, as recorded in ``progress.json``."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "pid_start": start_time(pid)}


def process_alive(pid, host, pid_start=None) -> bool | None:
    """True/False for a process on this host; None when it cannot be checked (another host, no pid)."""
    if not pid or not host or host != socket.gethostname():
        return None
    fields = _stat(int(pid))
    if fields is not None:  # Linux: gone, a zombie, or a new process under a reused pid is not alive
        if not fields or fields[0] in ("Z", "X"):
            return False
        return pid_start is None or start_time(int(pid)) == pid_start
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
