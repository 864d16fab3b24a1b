"""Graceful stops: SIGINT/SIGTERM (Ctrl-C, local kill) and SIGUSR2 (SLURM
preemption or time limit via submitit's ``--signal``).

Handlers only set a flag; the loop checkpoints at the next step boundary and
then either returns (local) or hands over to the previously installed
handler, which under submitit requeues the job and exits.
"""
from __future__ import annotations

import signal
import threading


class StopRequest:
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)

    def __init__(self):
        self.signum: int | None = None
        self._prev: dict[int, object] = {}

    def install(self) -> "StopRequest":
        if threading.current_thread() is not threading.main_thread():
            return self
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

    @property
    def requested(self) -> bool:
        return self.signum is not None

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
