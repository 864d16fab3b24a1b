"""The trainer <-> generator link, on torch.distributed: its design, the waits both ends share,
and the generator's end (``Spoke``). The trainer's end (``Hub``) lives in ``pool.py`` with the pool
that owns it: an order, a push or a collect is then the pool's decision and the hub's work in one file.

Why this transport:
- A ``TCPStore`` (torch.distributed's key-value server) carries everything small:
  each generator's start-up spec, readiness, the ordered control stream from the
  trainer (orders, weight-push announcements, probes, stop), the header of each
  rollout, "blocked" marks, state and errors. It lives in the trainer's process
  and listens on the run's address (``run_host``: ``MASTER_ADDR`` when the
  launcher set one, as torchrun and SLURM do), so a generator on another node
  connects exactly as a local one does.
- Two standalone gloo process groups (ranks: trainer 0, generator j at j+1)
  carry the bulk: rollouts as point-to-point sends (generator -> trainer), and
  weights as one broadcast per bucket (trainer -> every generator at once).
  They are not the default process group, so trainer ranks keep theirs for data
  parallelism. Weights are staged through CPU; NCCL would move them GPU to GPU
  (not done here: it needs two GPUs to test).
- torch.multiprocessing queues were the alternative, but they cannot leave one
  node, and several generator processes and trainer ranks on other nodes are
  where this has to go.

Nothing received can run code, and nobody without the run's secret can speak:
- The store listens on the address it was given only (``master_listen_fd``: TCPStore
  would otherwise bind every interface).
- Every value this module writes to the store is signed with HMAC-SHA256 under a
  per-run secret (``Hub.secret``, 32 random bytes), bound to its key; a reader refuses
  a value whose signature does not verify and fails with a ``TransportError``. A
  generator gets the secret in its environment (``SECRET_ENV``; readable by its own
  user only, never in argv), so a client that can reach the port but lacks the secret
  can neither order work, announce weights nor report rollouts. An operator starting a
  generator on another node reads it from a file only its user can read (``pool.py``).
- Messages, rollouts and the start-up spec travel as JSON plus raw tensor bytes
  (``transfer/wire.py``), never pickle; ``decode`` builds only the dataclasses and
  functions its caller names.
- The gloo groups' rendezvous keys are gloo's own, unsigned: a client could race them
  and put itself in a generator's (or the trainer's) place. So once a group has
  connected, both ends of every connection prove the secret to each other
  (``handshake``: HMAC of the other's fresh nonce) before anything else travels on it,
  and a rollout is also checked against a BLAKE2b digest in its signed header.

No silent hang: every wait has a deadline (``timeout_s``) and fails with a
``TransportError`` naming the stage. The trainer also fails fast when a
generator reports an error or its process exits (a local child), and judges a
generator dead when its heartbeat (``Spoke.start_heartbeat``: a signed counter
and state, every ``BEAT_S`` from a thread of its own, so it goes on while the
generator decodes or receives weights) has not moved for ``timeout_s``: the
only sign of life of a generator on another node. A generator fails when the
trainer's store goes away (its process died) or stays silent past the deadline.
Waits poll ``store.check`` (about 30 µs) with a short back-off: a timed-out
``store.wait`` would print a C++ warning on every retry.
"""
from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

from scalerl.generation.fleet.heartbeats import BEAT_S
from scalerl.generation.transfer.trust import abort_groups, gloo_group, handshake, local_address
from scalerl.generation.transfer.wire import (Signed, TransportError, broadcast, decode, digest, encode,  # noqa: F401 (re-exported)
                                             seconds, to_bytes_tensor)

PROBE_TAG = 1 << 30
"""Gloo tags of probe replies start here; rollout tags are their step number."""


class DeadlineError(TransportError):
    """A wait ran past its deadline (``timeout_s``)."""


def poll_until(ready: Callable[[], bool], *, timeout_s: float, stage: str, health: Callable[[str], None] = lambda s: None,
               health_every_s: float = 0.2) -> float:
    """Block until ``ready()``; call ``health(stage)`` (which may raise) every ``health_every_s``.
    Returns the seconds waited; raises ``TransportError`` after ``timeout_s``."""
    t0 = time.monotonic()
    deadline, next_health, delay = t0 + timeout_s, t0 + health_every_s, 1e-4
    while not ready():
        now = time.monotonic()
        if now >= next_health:
            health(stage)
            next_health = now + health_every_s
        if now >= deadline:
            raise DeadlineError(f"{stage}: still waiting after {timeout_s:g} s (async.timeout_s)")
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return time.monotonic() - t0


class Spoke:
    """A generator's end: reads the control stream, receives weights, sends rollouts."""

    def __init__(self, address: str, j: int, timeout_s: float, secret: bytes,
                 message_types: Sequence[type] = (), functions: Sequence[Callable] = ()):
        """``message_types``/``functions``: what the spec and control messages may hold (``decode``)."""
        host, port = address.rsplit(":", 1)
        self.host, self.port = host.strip("[]"), int(port)
        self.j, self.timeout_s, self.seq = j, timeout_s, 0
        self.types, self.functions = tuple(message_types), tuple(functions)
        self.store = dist.TCPStore(self.host, self.port, None, False, seconds(timeout_s))
        self.signed = Signed(self.store, secret)
        self.local = local_address(self.host, self.port)
        self._rollouts = self._weights = None
        self._sends: list = []  # (work, buffer): a gloo send completes once the trainer receives
        self.state = "starting"
        self.lost: Optional[str] = None
        """Set by the heartbeat thread when the trainer's store went away: why."""
        self._beating: Optional[threading.Thread] = None
        self._quiet = threading.Event()

    def start_heartbeat(self) -> None:
        """Write a signed ``beat/j`` (counter, state, host, pid) every ``BEAT_S`` from a daemon
        thread, on a store connection of its own (the main thread's may be mid-request). Torch's
        decode steps, gloo waits and checkpoint reads release the GIL, so it beats through them.
        A failed write means the trainer's store is gone: ``lost`` says why, and the generator
        stops at its next decode step or wait (``GeneratorServer``) instead of being orphaned.

        A link that goes down fails nothing: a ``set`` is not acknowledged, and a request waiting
        for its answer waits on a silent socket for good, holding the GIL (so no Python thread,
        this one included, runs again). So each beat also reads its key back (a round trip) and
        then re-arms an alarm of ``timeout_s`` plus two beats; SIGALRM's default action ends the
        process whatever its threads hold. A generator on a node cut off from its trainer exits
        instead of waiting forever, on the same bound by which the trainer presumes it dead."""
        store = Signed(dist.TCPStore(self.host, self.port, None, False, seconds(self.timeout_s)), self.signed._secret)
        info = {"host": self.local, "pid": os.getpid()}
        bound = math.ceil(self.timeout_s + 2 * BEAT_S)
        signal.alarm(bound)

        def beat() -> None:
            n = 0
            while True:
                try:
                    store.set(f"beat/{self.j}", encode({**info, "n": n, "state": self.state}))
                    store.raw.check([f"beat/{self.j}"])  # answered after the set: the trainer's store has it
                    signal.alarm(bound)
                except Exception as e:  # the store's process died, or the link to it did
                    self.lost = f"lost the trainer's store at {self.host}:{self.port} ({str(e).splitlines()[0]})"
                    return
                n += 1
                if self._quiet.wait(BEAT_S):
                    signal.alarm(0)
                    return

        print(f"[scalerl] generator {self.j}: SIGALRM ends this process if the trainer's store at {self.host}:"
              f"{self.port} does not answer for {bound} s (async.timeout_s + 2 beats)", file=sys.stderr, flush=True)
        self._beating = threading.Thread(target=beat, name=f"heartbeat-{self.j}", daemon=True)
        self._beating.start()

    def spec(self):
        return decode(self.signed.get(f"spec/{self.j}"), self.types, self.functions)

    def connect(self, n: int) -> None:
        self.signed.set(f"ready/{self.j}", b"1")
        self._rollouts = gloo_group(self.store, "rollouts", self.j + 1, n + 1, self.timeout_s, self.local)
        self._weights = gloo_group(self.store, "weights", self.j + 1, n + 1, self.timeout_s, self.local)
        for name, group in (("rollouts", self._rollouts), ("weights", self._weights)):
            handshake(group, self.j + 1, n + 1, self.signed._secret, name, self.timeout_s)

    def poll(self):
        """The next control message, or None if the trainer has not sent it yet (non-blocking).
        A message not signed with the run's secret raises ``TransportError``."""
        key = f"ctl/{self.seq}"
        if not self.store.check([key]):
            return None
        msg = decode(self.signed.get(key), self.types, self.functions)
        self.seq += 1
        self.signed.set(f"ack/{self.j}", str(self.seq).encode())
        return msg

    def set_state(self, text: str) -> None:
        self.state = text
        self.signed.set(f"state/{self.j}", text.encode())

    def mark_blocked(self, version: int) -> None:
        """Tell the trainer: nothing more can be done here until ``version`` arrives."""
        self.signed.set(f"blocked/{self.j}/{version}", b"")

    def tell(self, key: str) -> None:
        """A signed mark the trainer waits for (a handshake step: ``vllm_nccl.py``)."""
        self.signed.set(key, b"")

    def send(self, key: str, tag: int, header: dict, obj) -> None:
        buf = to_bytes_tensor(obj)
        self._sends.append((self._rollouts.send([buf], 0, tag), buf))
        self.signed.set(key, encode({**header, "nbytes": buf.numel(), "digest": digest([buf])}))
        while len(self._sends) > 64:  # bound the buffers held for the trainer
            work, _ = self._sends.pop(0)
            work.wait(seconds(self.timeout_s))

    def recv_broadcast(self, bufs: Sequence[torch.Tensor]) -> Callable[[], None]:
        """Start receiving the trainer's next buckets into ``bufs`` (over connections ``handshake``
        authenticated: a digest of every push would cost seconds for a large model); returns the
        function that waits for them, so a generator can copy one bucket while the next arrives."""
        works = broadcast(self._weights, bufs, self.timeout_s)

        def wait() -> None:
            for w in works:
                w.wait(seconds(self.timeout_s))

        return wait

    def close(self) -> None:
        """Abort the process groups: sends the trainer will never receive (it stopped first) must
        not hold this process at exit. The heartbeat's last beat says "stopped"."""
        abort_groups(self._rollouts, self._weights)
        self._rollouts = self._weights = None
        self._sends.clear()
        if self._beating is not None:
            self._quiet.set()
            self._beating.join(timeout=2 * BEAT_S)  # one stuck on a dead link must not hold the exit
            self._beating = None
            signal.alarm(0)  # a clean stop: no watchdog (start_heartbeat) outlives the link
            self.state = "stopped"
            try:
                self.signed.set(f"beat/{self.j}", encode({"host": self.local, "pid": os.getpid(), "n": -1,
                                                          "state": self.state}))
            except Exception:  # the trainer is gone: nobody to tell
                pass

    def report_error(self, text: str) -> None:
        try:
            self.signed.set(f"error/{self.j}", text.encode()[-4000:])
        except Exception:  # the trainer is gone too: nobody to tell
            pass
