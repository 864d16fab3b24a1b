"""The trainer <-> generator link, on torch.distributed.

Why this transport:
- A ``TCPStore`` (torch.distributed's key-value server) carries everything small:
  each generator's start-up spec, readiness, the ordered control stream from the
  trainer (orders, weight-push announcements, probes, stop), the header of each
  rollout, "blocked" marks, state and errors. It lives in the trainer's process
  and is reached by ``host:port``, so a generator on another node connects
  exactly as a local one does.
- Two standalone gloo process groups (ranks: trainer 0, generator j at j+1)
  carry the bulk: rollouts as point-to-point sends (generator -> trainer), and
  weights as one broadcast per bucket (trainer -> every generator at once).
  They are not the default process group, so trainer ranks keep theirs for data
  parallelism. Weights are staged through CPU; NCCL would move them GPU to GPU
  (not done here: it needs two GPUs to test).
- torch.multiprocessing queues were the alternative, but they cannot leave one
  node, and several generator processes and trainer ranks on other nodes are
  where this has to go.

No silent hang: every wait has a deadline (``timeout_s``) and fails with a
``TransportError`` naming the stage. The trainer also fails fast when a
generator reports an error or its process exits; a generator fails when the
trainer's store goes away (its process died) or stays silent past the deadline.
Waits poll ``store.check`` (about 30 µs) with a short back-off: a timed-out
``store.wait`` would print a C++ warning on every retry.
"""
from __future__ import annotations

import datetime
import pickle
import time
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist

PROBE_TAG = 1 << 30
"""Gloo tags of probe replies start here; rollout tags are their step number."""


class TransportError(RuntimeError):
    """A wait on the other side failed (timeout, dead process, reported error); the message names the stage."""


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def _group(store, name: str, rank: int, size: int, timeout_s: float):
    return dist.ProcessGroupGloo(dist.PrefixStore(name, store), rank, size, _td(timeout_s))


def to_bytes_tensor(obj) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)


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
            raise TransportError(f"{stage}: still waiting after {timeout_s:g} s (async.timeout_s)")
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return time.monotonic() - t0


class Hub:
    """The trainer's end: hosts the store, sends control messages and weights, receives rollouts."""

    def __init__(self, n_generators: int, timeout_s: float, host: str = "127.0.0.1"):
        self.n, self.timeout_s, self.host = n_generators, timeout_s, host
        self.store = dist.TCPStore(host, 0, None, True, _td(timeout_s), wait_for_workers=False)
        self.seq = 0  # control messages sent
        self.forgotten = 0  # control messages every generator has read, deleted from the store
        self.alive: Callable[[int], Optional[str]] = lambda j: None
        """Set by the process owner: a description of generator j's death, or None while it lives."""
        self._rollouts = self._weights = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.store.port}"

    # ---------------------------------------------------------------- start-up
    def put_spec(self, j: int, spec) -> None:
        self.store.set(f"spec/{j}", pickle.dumps(spec))

    def connect(self) -> None:
        """Wait until every generator has loaded its model, then join the two process groups."""
        keys = [f"ready/{j}" for j in range(self.n)]
        self.wait(lambda: self.store.check(keys), "start-up: waiting for the generator processes to load their models")
        # Every generator is up and joining: the groups' own rendezvous is now quick.
        self._rollouts = _group(self.store, "rollouts", 0, self.n + 1, self.timeout_s)
        self._weights = _group(self.store, "weights", 0, self.n + 1, self.timeout_s)

    # ------------------------------------------------------------ control flow
    def send(self, kind: str, payload=None) -> None:
        """Append one message to the control stream every generator reads in order."""
        self.store.set(f"ctl/{self.seq}", pickle.dumps((kind, payload)))
        self.seq += 1
        if self.seq % 64 == 0:
            self._forget_read_messages()

    def _forget_read_messages(self) -> None:
        """Delete the messages every generator has read (a long run would otherwise keep every order)."""
        acks = [self.store.get(f"ack/{j}") if self.store.check([f"ack/{j}"]) else b"0" for j in range(self.n)]
        upto = min(int(a) for a in acks)
        for k in range(self.forgotten, upto):
            self.store.delete_key(f"ctl/{k}")
        self.forgotten = max(upto, self.forgotten)

    def wait(self, ready: Callable[[], bool], stage: str) -> float:
        return poll_until(ready, timeout_s=self.timeout_s, stage=stage, health=self.health)

    def health(self, stage: str) -> None:
        """Raise if a generator reported an error or its process is gone."""
        for j in range(self.n):
            if self.store.check([f"error/{j}"]):
                raise TransportError(f"{stage}: generator {j} failed: {self.store.get(f'error/{j}').decode()}")
            death = self.alive(j)
            if death:
                raise TransportError(f"{stage}: generator {j} {death}")

    def explain(self, stage: str, grace_s: float = 5.0) -> None:
        """After a failed collective: raise naming the generator that died, if one did. A killed
        process's sockets close before its exit can be collected, so the connection error may
        come first; give the death ``grace_s`` to become visible rather than report a bare
        'connection closed'."""
        deadline = time.monotonic() + grace_s
        self.health(stage)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            self.health(stage)

    def has(self, keys: Sequence[str]) -> bool:
        return self.store.check(list(keys))

    def state(self, j: int) -> str:
        return self.store.get(f"state/{j}").decode() if self.store.check([f"state/{j}"]) else "not started"

    # ------------------------------------------------------------------- bulk
    def recv(self, j: int, key: str, tag: int, stage: str):
        """Wait for generator j's ``key`` header, then receive and unpickle its payload."""
        self.wait(lambda: self.store.check([key]), f"{stage} (generator {j} is {self.state(j)!r})")
        header = pickle.loads(self.store.get(key))
        buf = torch.empty(header["nbytes"], dtype=torch.uint8)
        try:
            self._rollouts.recv([buf], j + 1, tag).wait(_td(self.timeout_s))
        except RuntimeError as e:
            self.explain(stage)
            raise TransportError(f"{stage}: receiving from generator {j} failed: {e}") from None
        self.store.delete_key(key)
        return header, pickle.loads(buf.numpy().tobytes())

    def start_broadcast(self, bufs: Sequence[torch.Tensor]) -> list:
        """Start sending ``bufs`` to every generator; returns the pending works (see ``finish``)."""
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.timeout = 0, _td(self.timeout_s)
        return [self._weights.broadcast([b], opts) for b in bufs]

    def finish(self, works: Sequence, stage: str) -> None:
        """Wait for started works, failing with the stage's name."""
        try:
            for w in works:
                w.wait(_td(self.timeout_s))
        except RuntimeError as e:
            self.explain(stage)
            raise TransportError(f"{stage}: {e}") from None

    def close(self) -> None:
        _abort(self._rollouts, self._weights)
        self._rollouts = self._weights = None


class Spoke:
    """A generator's end: reads the control stream, receives weights, sends rollouts."""

    def __init__(self, address: str, j: int, timeout_s: float):
        host, port = address.rsplit(":", 1)
        self.j, self.timeout_s, self.seq = j, timeout_s, 0
        self.store = dist.TCPStore(host, int(port), None, False, _td(timeout_s))
        self._rollouts = self._weights = None
        self._sends: list = []  # (work, buffer): a gloo send completes once the trainer receives

    def spec(self):
        return pickle.loads(self.store.get(f"spec/{self.j}"))

    def connect(self, n: int) -> None:
        self.store.set(f"ready/{self.j}", b"1")
        self._rollouts = _group(self.store, "rollouts", self.j + 1, n + 1, self.timeout_s)
        self._weights = _group(self.store, "weights", self.j + 1, n + 1, self.timeout_s)

    def poll(self):
        """The next control message, or None if the trainer has not sent it yet (non-blocking)."""
        key = f"ctl/{self.seq}"
        if not self.store.check([key]):
            return None
        msg = pickle.loads(self.store.get(key))
        self.seq += 1
        self.store.set(f"ack/{self.j}", str(self.seq).encode())
        return msg

    def set_state(self, text: str) -> None:
        self.store.set(f"state/{self.j}", text.encode())

    def mark_blocked(self, version: int) -> None:
        """Tell the trainer: nothing more can be done here until ``version`` arrives."""
        self.store.set(f"blocked/{self.j}/{version}", b"")

    def send(self, key: str, tag: int, header: dict, obj) -> None:
        buf = to_bytes_tensor(obj)
        self._sends.append((self._rollouts.send([buf], 0, tag), buf))
        self.store.set(key, pickle.dumps({**header, "nbytes": buf.numel()}))
        while len(self._sends) > 64:  # bound the buffers held for the trainer
            work, _ = self._sends.pop(0)
            work.wait(_td(self.timeout_s))

    def recv_broadcast(self, bufs: Sequence[torch.Tensor]) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.timeout = 0, _td(self.timeout_s)
        for b in bufs:
            self._weights.broadcast([b], opts).wait(_td(self.timeout_s))

    def close(self) -> None:
        """Abort the process groups: sends the trainer will never receive (it stopped first) must
        not hold this process at exit."""
        _abort(self._rollouts, self._weights)
        self._rollouts = self._weights = None
        self._sends.clear()

    def report_error(self, text: str) -> None:
        try:
            self.store.set(f"error/{self.j}", text.encode()[-4000:])
        except Exception:  # the trainer is gone too: nobody to tell
            pass


def _abort(*groups) -> None:
    """Abort process groups without waiting on their peers; one already broken has nothing left to release."""
    for g in groups:
        if g is not None:
            try:
                g.abort()
            except Exception:  # already broken: nothing left to release
                pass
