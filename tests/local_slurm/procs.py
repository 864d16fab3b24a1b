"""Daemon processes by pid file: spawn in the foreground of a new session, probe, wait, stop.

Rules from running SLURM on CI machines (see the project's SLURM notes):
- PID 1 there does not reap, and /run persists across machine reuse, so a pid file is live only
  if its PID exists, is not a zombie and has the expected name (/proc/PID/stat, /proc/PID/comm).
- Nothing is ever stopped by name, only by the PID in its pid file.
- Every wait has a timeout and its error carries the tail of the daemon's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence


class ClusterError(RuntimeError):
    """The local cluster could not be installed, started or stopped; the message says why."""


# Daemons this process spawned, so that a stopped one is reaped instead of left a zombie.
_CHILDREN: dict[int, subprocess.Popen] = {}


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def is_running(pid: int, name: str) -> bool:
    """True if `pid` is a live (non-zombie) process whose comm is `name` (truncated to 15 chars)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]  # the comm in field 2 may contain spaces
    return state not in ("Z", "X") and comm == name[:15]


def live_pid(pid_file: Path, name: str) -> int | None:
    pid = read_pid(pid_file)
    return pid if pid is not None and is_running(pid, name) else None


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} not readable)"
    return "\n".join(text[-lines:]) or f"({path} is empty)"


def logs_tail(paths: Sequence[Path], lines: int = 25) -> str:
    return "\n".join(f"--- tail of {p} ---\n{tail(p, lines)}" for p in paths if p.exists())


def spawn(argv: Sequence[str], out_path: Path, env: Mapping[str, str]) -> subprocess.Popen:
    """Start a daemon in the foreground of its own session; stdout and stderr go to `out_path`.

    Its own session keeps it alive after this process exits and away from the terminal's ^C.
    stdio never points at a pipe of ours, so a caller that captures output cannot hang on it.
    """
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=dict(env), start_new_session=True, close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def probe(argv: Sequence[str], env: Mapping[str, str], timeout: float = 10.0) -> tuple[int, str]:
    """Run a client command; (returncode, stdout+stderr). A hang or missing binary is rc 127."""
    try:
        res = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=dict(env), timeout=timeout,
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        return 127, str(exc)
    return res.returncode, res.stdout + res.stderr


def wait_until(
    ready: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    logs: Sequence[Path],
    proc: subprocess.Popen | None = None,
    interval: float = 0.1,
) -> float:
    """Poll `ready` until true; fail early if `proc` exits. Returns the seconds waited."""
    t0 = time.monotonic()
    while True:
        if ready():
            return time.monotonic() - t0
        if proc is not None and proc.poll() is not None:
            raise ClusterError(
                f"{what}: process exited with code {proc.returncode}\n{logs_tail(logs)}")
        if time.monotonic() - t0 > timeout:
            raise ClusterError(f"{what}: not ready after {timeout:.0f} s\n{logs_tail(logs)}")
        time.sleep(interval)


def terminate(pid_file: Path, name: str, timeout: float = 20.0) -> bool:
    """SIGTERM the daemon in `pid_file` (SIGKILL after `timeout`), wait for it, drop the pid file.

    Returns True if a live daemon was stopped, False if there was none (stale file removed).
    """
    pid = live_pid(pid_file, name)
    if pid is not None:
        _signal_and_wait(pid, name, signal.SIGTERM, timeout)
        if is_running(pid, name):
            _signal_and_wait(pid, name, signal.SIGKILL, 5.0)
        if is_running(pid, name):
            raise ClusterError(f"{name} (pid {pid}) survived SIGKILL")
    pid_file.unlink(missing_ok=True)
    return pid is not None


def _signal_and_wait(pid: int, name: str, sig: signal.Signals, timeout: float) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while is_running(pid, name) and time.monotonic() < deadline:
        child = _CHILDREN.get(pid)
        if child is not None:
            child.poll()  # reaps it if it was ours
        time.sleep(0.05)
    child = _CHILDREN.pop(pid, None) if not is_running(pid, name) else None
    if child is not None:
        child.poll()
