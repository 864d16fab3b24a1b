"""Graceful stops: SIGINT/SIGTERM (Ctrl-C, local kill), SIGUSR2 (SLURM
preemption or time limit via submitit's ``--signal``), and a stop request file
(``<run_dir>/stop.json``, written by a sweep's early stopping or pruning).

Handlers only set a flag; the loop checkpoints at the next step boundary and
then either returns (local) or hands over to the previously installed
handler, which under submitit requeues the job and exits. A stop request ends
the run for good: status ``stopped_early``.

A stopped run is not a finished one: the entry point exits with ``exit_code``
(128 + the signal: 130 for Ctrl-C, 143 for SIGTERM), as shells and schedulers
expect. Work that runs before the loop and has nothing to checkpoint (the warm
start) polls ``pending_stop`` and gives up at once.
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path

STOP_REQUEST = "stop.json"
"""In a run directory: the sweep asks the run to stop for good (scalerl.launch.early_stop)."""


_received: list[int] = []   # the signals any StopRequest of this process took, in order


def received_signal() -> int | None:
    """The last stop signal this process received (None: none), also after ``restore``."""
    return _received[-1] if _received else None


def pending_stop() -> int | None:
    """SIGINT or SIGTERM, if one arrived: the caller should stop now (SIGUSR2, a preemption,
    is left to the loop, which checkpoints and requeues)."""
    signum = received_signal()
    return signum if signum in (signal.SIGINT, signal.SIGTERM) else None


def exit_code(signum: int | None) -> int:
    """The shell's exit status of a process stopped by ``signum``: 128 + signum (130 if unknown)."""
    return 128 + int(signum if signum is not None else signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """SIGTERM in a sweep's own process, raised where it lands as Ctrl-C's KeyboardInterrupt is, so the
    sweep stops its arms the same way; ``signum`` gives the exit status (``exit_code``)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_on_sigterm() -> None:
    """In a sweep's own process (never a run's: its StopRequest takes SIGTERM only while it is the
    default), SIGTERM raises ``Interrupted``; the entry point says "interrupted" and exits 143."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_interrupted)


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def signal_of(interrupt: KeyboardInterrupt) -> int:
    """The signal behind a KeyboardInterrupt: SIGTERM for ``Interrupted``, else SIGINT (Ctrl-C)."""
    return getattr(interrupt, "signum", signal.SIGINT)


class StopRequest:
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)

    def __init__(self, run_dir: Path | None = None):
        self.signum: int | None = None
        self._prev: dict[int, object] = {}
        self.request_file = None if run_dir is None else Path(run_dir) / STOP_REQUEST

    def install(self) -> "StopRequest":
        if threading.current_thread() is not threading.main_thread():
            return self
        _received.clear()  # a new run: a signal that stopped an earlier one in this process is spent
        for s in self.SIGNALS:
            current = signal.getsignal(s)
            # Under submitit, SIGTERM is deliberately ignored ("bypass"): SLURM sends it
            # before USR2 on preemption, and USR2 is the signal to checkpoint on. Only
            # SIGUSR2 wraps a non-default handler; SIGINT/SIGTERM are taken only if default.
            if s != signal.SIGUSR2 and current not in (signal.SIG_DFL, signal.default_int_handler, None):
                continue
            self._prev[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self.signum = signum
        _received.append(signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None or self.early

    @property
    def early(self) -> bool:
        """The sweep stopped this run early (a stat per step: microseconds)."""
        return self.signum is None and self.request_file is not None and self.request_file.exists()

    @property
    def preempted(self) -> bool:
        return self.signum == signal.SIGUSR2

    def restore(self) -> None:
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev.clear()

    def hand_over(self) -> None:
        """Call the handler that was installed before ours (submitit: requeue + exit)."""
        prev = self._prev.get(self.signum)
        self.restore()
        if callable(prev):
            prev(self.signum, None)
