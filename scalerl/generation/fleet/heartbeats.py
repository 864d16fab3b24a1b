"""How the trainer's hub tells a live generator from a dead or cut-off one (``Hub`` inherits this).

Liveness comes from heartbeats: every generator writes a signed ``beat/j`` (a counter, its
state, its host and pid) every ``BEAT_S`` from a thread of its own (``Spoke.start_heartbeat``). A
child's exit status is the fast path (``alive``, set by the pool); any generator, local or on another
node, is presumed dead when its counter has not moved for ``async.timeout_s`` plus two beats. After
a failed collective the hub names the generator that fell silent rather than a live one that only
reported the timeout it ran into while waiting on it (docs/async.md, 'Generators on other nodes').
"""
from __future__ import annotations

import time
from typing import Optional

from scalerl.generation.transfer.wire import TransportError, decode

BEAT_S = 1.0
"""Seconds between two heartbeats of a generator (``Spoke.start_heartbeat``)."""


class Heartbeats:
    """Needs ``n``, ``timeout_s``, ``store`` (raw), ``signed``, ``_beats`` ({j: (n, seen at, beat)})
    and ``alive`` (j -> why it is dead, or None) from the class that mixes it in."""

    def health(self, stage: str) -> None:
        """Raise if a generator reported an error, its process is gone, or its heartbeat stopped."""
        for j in range(self.n):
            if self.store.check([f"error/{j}"]):
                error = self.signed.get(f"error/{j}").decode()
                # a generator's own timeout may only be what another one's silence caused
                self._silent(stage, then=f"generator {j} then failed: {error}")
                raise TransportError(f"{stage}: generator {j} failed: {error}; {self.heard()}")
            death = self.alive(j)
            if death:
                raise TransportError(f"{stage}: generator {j} {death}")
            self._judge_beat(j, stage)

    def beat(self, j: int) -> Optional[dict]:
        """Generator j's latest heartbeat ({n, state, host, pid}), or None before its first."""
        key = f"beat/{j}"
        if not self.store.check([key]):
            return None
        b = decode(self.signed.get(key))
        seen = self._beats.get(j)
        if seen is None or seen[0] != b["n"]:
            self._beats[j] = (b["n"], time.monotonic(), b)
        return b

    def _judge_beat(self, j: int, stage: str) -> None:
        """Dead when the heartbeat has not moved for ``timeout_s`` (plus two beats: the beat seen
        move may already have been a beat old), measured on this clock (the generator's may be
        another node's). ``timeout_s``, not less: a beat comes every ``BEAT_S`` from its own
        thread, but a process that holds the GIL in a long native call (a checkpoint load, an
        engine's compilation) may miss some, and ``timeout_s`` already bounds every other silence
        the run tolerates; a wait that started before the silence ends on its own deadline, and
        says what was last heard (``heard``). Before a first beat, the start-up deadline covers it."""
        b = self.beat(j)
        if b is None:
            return
        quiet = time.monotonic() - self._beats[j][1]
        if quiet > self.timeout_s + 2 * BEAT_S:
            raise TransportError(f"{stage}: generator {j} on {b['host']} (pid {b['pid']}) is presumed dead: its "
                                 f"heartbeat has not moved for {quiet:.0f} s (async.timeout_s={self.timeout_s:g}); "
                                 f"it was last {b['state']!r}")

    def heard(self) -> str:
        """Per generator: where it runs, how long since its heartbeat moved, its last state."""
        now, parts = time.monotonic(), []
        for j in range(self.n):
            if j not in self._beats:
                parts.append(f"generator {j}: no heartbeat yet")
                continue
            _, moved, b = self._beats[j]
            parts.append(f"generator {j} on {b['host']} (pid {b['pid']}): heartbeat moved {now - moved:.1f} s ago, "
                         f"last {b['state']!r}")
        return "; ".join(parts)

    def explain(self, stage: str, grace_s: float = 5.0) -> None:
        """After a failed collective: raise naming the generator that died, if one did. A killed
        process's sockets close before its exit can be collected, so the connection error may
        come first; give the death ``grace_s`` to become visible rather than report a bare
        'connection closed'."""
        counters = self._counters()
        deadline = time.monotonic() + grace_s
        self._silent(stage)
        while time.monotonic() < deadline:
            for j in range(self.n):
                death = self.alive(j)
                if death:
                    raise TransportError(f"{stage}: generator {j} {death}")
            time.sleep(0.05)
        # The trainer saw no beats while it waited on the collective, so when each last moved is
        # unknown; what it can see is whose counter moves now. One that neither moves nor reported
        # an error is silent: a generator whose link is gone (a live one starved by the wait on
        # it reports its own timeout, which health() would otherwise pass on as the cause).
        now = self._counters()
        for j in range(self.n):
            if counters[j] is not None and now[j] == counters[j] and not self.store.check([f"error/{j}"]):
                b = self._beats[j][2]
                others = "; ".join(f"generator {k} failed: {self.signed.get(f'error/{k}').decode()}"
                                   for k in range(self.n) if self.store.check([f"error/{k}"]))
                raise TransportError(f"{stage}: generator {j} on {b['host']} (pid {b['pid']}) stopped answering: its "
                                     f"heartbeat did not move in {grace_s:g} s after the failure "
                                     f"(async.timeout_s={self.timeout_s:g}); it was last {b['state']!r}"
                                     + (f"; {others}" if others else ""))
        self.health(stage)

    def _counters(self) -> dict[int, Optional[int]]:
        return {j: (self.beat(j) or {}).get("n") for j in range(self.n)}

    def _silent(self, stage: str, then: str = "") -> None:
        """After a failed collective, or before reporting a generator's own error: the generator
        whose heartbeat stopped first is the likely cause (a node cut off), even before it is
        presumed dead, and even if a live generator already reported the timeout it ran into while
        waiting on it (``then``: that report, appended)."""
        now = time.monotonic()
        for j in range(self.n):
            self.beat(j)
        quiet = {j: now - moved for j, (_, moved, _) in self._beats.items()}
        if not quiet:
            return
        j = max(quiet, key=quiet.get)
        # The first to fall silent: a generator blocked on a collective with the lost one may stop
        # beating too (gloo can hold its GIL), but later.
        others = max((q for k, q in quiet.items() if k != j), default=0.0)
        if quiet[j] > max(self.timeout_s / 2, 3 * BEAT_S) and quiet[j] - others > 3 * BEAT_S:
            b = self._beats[j][2]
            raise TransportError(f"{stage}: generator {j} on {b['host']} (pid {b['pid']}) stopped answering: its "
                                 f"heartbeat has not moved for {quiet[j]:.0f} s, {quiet[j] - others:.0f} s longer "
                                 "than any other's "
                                 f"(async.timeout_s={self.timeout_s:g}); it was last {b['state']!r}"
                                 + (f"; {then}" if then else ""))
