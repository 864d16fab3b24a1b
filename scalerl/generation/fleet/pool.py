"""Generator processes seen from the trainer: start them, order batches, push
weights, collect rollouts, stop them.

Each generator is a plain ``python -m scalerl.generation.worker`` process that
connects back to the trainer's ``Hub`` (below: the trainer's end of the link that
``transport.py`` describes, whose other end is its ``Spoke``) at the run's address.
The pool starts generator j itself, as a child that dies with the trainer, or,
for the last ``external`` of them (``async.external_generators``), waits for an
operator to start it on another node with the address and its index alone
(docs/async.md, 'Generators on other nodes'). A child is judged dead by its
exit status at once, any generator by its heartbeat (``Hub.health``). The pool
knows nothing of tasks, rewards or the training loop: orders are token ids and
sampling settings, replies are ``Generation`` shards with the generator's clock.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import torch

from scalerl.core.errors import check
from scalerl.core.jsonio import write_json_atomic
from scalerl.generation.engines import GENERATORS
from scalerl.generation.engines.interface import Generation
from scalerl.generation.fleet.heartbeats import Heartbeats
from scalerl.generation.fleet.transport import PROBE_TAG, DeadlineError, poll_until
from scalerl.generation.transfer.trust import (LOOPBACK, SECRET_ENV, abort_groups, gloo_group, handshake, hosting_store,
                                               run_host, secret_folder, write_secret)
from scalerl.generation.transfer.wire import Signed, TransportError, broadcast, decode, digest, encode, seconds
from scalerl.generation.transfer.buckets import BUCKET_BYTES, in_order, lay_out, pack, packed_bytes, weight_schema
from scalerl.generation.transfer.vllm_nccl import NcclPlane
from scalerl.generation.fleet.generator_loop import Shard, WorkerSpec


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _death_signal():
    """A preexec_fn that has the kernel SIGKILL the child when its parent dies (Linux), or None.

    A trainer killed with kill -9 while its generators start up would otherwise leave them
    waiting out two 300 s store timeouts. The signal fires when the thread that
    forked exits; ``start`` runs on the trainer's main thread, which lives as long as the
    trainer. prctl is resolved here, before the fork, so the child only makes the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # stdlib; only here, where a child is about to be spawned

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: nothing would fire
            os._exit(1)

    return arm


def spawn_child(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    """Start a generator process that dies with this one, whatever the moment."""
    return subprocess.Popen(list(argv), env=dict(env), preexec_fn=_death_signal())


class Hub(Heartbeats):
    """The trainer's end: hosts the store, sends control messages and weights, receives rollouts."""

    def __init__(self, n_generators: int, timeout_s: float, host: str = LOOPBACK, rollout_types: Sequence[type] = ()):
        self.n, self.timeout_s, self.host = n_generators, timeout_s, host
        self.secret = secrets.token_bytes(32)
        """The run's secret: give it to generators through ``SECRET_ENV``, never argv."""
        self.rollout_types = tuple(rollout_types)
        """The dataclasses a rollout or probe reply may hold (``decode``)."""
        self.store = hosting_store(host, timeout_s)
        self.signed = Signed(self.store, self.secret)
        self.seq = 0  # control messages sent
        self.forgotten = 0  # control messages every generator has read, deleted from the store
        self.alive: Callable[[int], Optional[str]] = lambda j: None
        """Set by the process owner: a description of generator j's death, or None while it lives."""
        self._rollouts = self._weights = None
        self._beats: dict[int, tuple[int, float, dict]] = {}
        """Generator j's last heartbeat: (its counter, this clock when it last moved, the beat)."""

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.store.port}"

    # ---------------------------------------------------------------- start-up
    def put_spec(self, j: int, spec) -> None:
        self.signed.set(f"spec/{j}", encode(spec))

    def connect(self) -> None:
        """Wait until every generator has loaded its model, then join the two process groups."""
        keys = [f"ready/{j}" for j in range(self.n)]
        self.wait(lambda: self.store.check(keys), "start-up: waiting for the generator processes to load their models")
        for k in keys:
            self.signed.get(k)  # a ready mark planted by a client without the secret is refused here
        # Every generator is up and joining: the groups' own rendezvous is now quick.
        self._rollouts = gloo_group(self.store, "rollouts", 0, self.n + 1, self.timeout_s, self.host)
        self._weights = gloo_group(self.store, "weights", 0, self.n + 1, self.timeout_s, self.host)
        for name, group in (("rollouts", self._rollouts), ("weights", self._weights)):
            try:
                handshake(group, 0, self.n + 1, self.secret, name, self.timeout_s)
            except RuntimeError as e:
                self.explain(f"start-up: the {name} group's handshake")
                raise TransportError(f"start-up: the {name} group's handshake failed: {e}") from None

    # ------------------------------------------------------------ control flow
    def send(self, kind: str, payload=None) -> None:
        """Append one message to the control stream every generator reads in order."""
        self.signed.set(f"ctl/{self.seq}", encode([kind, payload]))
        self.seq += 1
        if self.seq % 64 == 0:
            self._forget_read_messages()

    def _forget_read_messages(self) -> None:
        """Delete the messages every generator has read (a long run would otherwise keep every order)."""
        acks = [self.signed.get(f"ack/{j}") if self.store.check([f"ack/{j}"]) else b"0" for j in range(self.n)]
        upto = min(int(a) for a in acks)
        for k in range(self.forgotten, upto):
            self.store.delete_key(f"ctl/{k}")
        self.forgotten = max(upto, self.forgotten)

    def wait(self, ready: Callable[[], bool], stage: str) -> float:
        try:
            return poll_until(ready, timeout_s=self.timeout_s, stage=stage, health=self.health)
        except DeadlineError as e:  # say what each generator was last heard doing, and when
            raise DeadlineError(f"{e}; {self.heard()}") from None

    def has(self, keys: Sequence[str]) -> bool:
        """Whether every key is there, signed by a peer with the secret (a planted one raises)."""
        if not self.store.check(list(keys)):
            return False
        for k in keys:
            self.signed.get(k)
        return True

    def state(self, j: int) -> str:
        return self.signed.get(f"state/{j}").decode() if self.store.check([f"state/{j}"]) else "not started"

    # ------------------------------------------------------------------- bulk
    def recv(self, j: int, key: str, tag: int, stage: str):
        """Wait for generator j's ``key`` header, then receive its payload and check it against the header."""
        self.wait(lambda: self.store.check([key]), f"{stage} (generator {j} is {self.state(j)!r})")
        header = decode(self.signed.get(key))
        buf = torch.empty(header["nbytes"], dtype=torch.uint8)
        try:
            self._rollouts.recv([buf], j + 1, tag).wait(seconds(self.timeout_s))
        except RuntimeError as e:
            self.explain(stage)
            raise TransportError(f"{stage}: receiving from generator {j} failed: {e}") from None
        self.store.delete_key(key)
        if digest([buf]) != header.get("digest"):
            raise TransportError(f"{stage}: refused generator {j}'s payload: it does not match its signed header")
        return header, decode(buf.numpy().tobytes(), self.rollout_types)

    def start_broadcast(self, bufs: Sequence[torch.Tensor]) -> list:
        """Start sending ``bufs`` to every generator; returns the pending works (see ``finish``).
        Call it only after the push was announced on the control stream: a generator enters the
        broadcast when it reads the announcement (at its next decode step), so the trainer's
        ``finish`` waits at most that long, never for a generator that does not know."""
        return broadcast(self._weights, bufs, self.timeout_s)

    def finish(self, works: Sequence, stage: str) -> None:
        """Wait for started works, failing with the stage's name."""
        try:
            for w in works:
                w.wait(seconds(self.timeout_s))
        except RuntimeError as e:
            self.explain(stage)
            raise TransportError(f"{stage}: {e}") from None

    def close(self) -> None:
        abort_groups(self._rollouts, self._weights)
        self._rollouts = self._weights = None  # the store (and its listening fd) goes with the hub


class GeneratorPool:
    worker = ("-m", "scalerl.generation.worker")
    """The generator's command after the interpreter (a test's paced worker replaces it)."""

    def __init__(self, spec: WorkerSpec, n: int, state: Mapping[str, torch.Tensor], devices: Sequence[str] = (),
                 bucket_bytes: int = BUCKET_BYTES, external: int = 0, host: str | None = None,
                 secret_dir: str | Path | None = None, rendezvous: Path | None = None,
                 device: torch.device | str = "cpu"):
        """``spec``: the settings every generator shares (rank and schema are filled in here);
        ``state``: the trainer's weights (their names and shapes fix the push schema; only shapes
        are read, so a sharded ``model.state_dict()`` needs no gather);
        ``devices``: generator j's device (default: the spec's); ``bucket_bytes``: the size of one
        broadcast of a push (``transfer/buckets.py``; a push holds two); ``external``: how many generators,
        the last ones, an operator starts (``async.external_generators``); ``host``: the store's
        address when ``MASTER_ADDR`` is unset (``trust.run_host``); ``secret_dir``: where the
        secret file for an operator goes (default ``~/.scalerl/secrets``); ``rendezvous``: a file
        to write the address and the secret file's path to, for generators the job itself starts
        on its generator nodes (``job_rendezvous``; ``launch/roles.py`` reads it); ``device``: this
        trainer rank's, which vLLM's NCCL data plane broadcasts from (``transfer/vllm_nccl.py``)."""
        self.n, self.timeout_s = n, spec.timeout_s
        self.local = n - external  # generators 0 .. local-1 are this process's children
        self.host, self.secret_dir, self.secret_file, self.rendezvous = host, secret_dir, None, rendezvous
        self.devices = list(devices) or [spec.device] * n
        # Floating tensors travel in the generator's dtype (half the bytes for a bf16 generator).
        self.schema = tuple(weight_schema(state, dtype=spec.dtype))
        self.spec = replace(spec, schema=self.schema, n_generators=n)
        self.layout = lay_out(self.schema, bucket_bytes)
        self.bufs: list[torch.Tensor] = []  # the two bucket buffers of a push, made at the first
        # generation.weight_transfer=nccl: pushes go from this GPU to vLLM's workers, not over gloo.
        nccl = getattr(spec.generation_cfg, "weight_transfer", None) == "nccl"
        if nccl:  # NCCL pairs distinct devices only (this process's generators; external ones run elsewhere)
            shared = ", ".join(str(j) for j in range(self.local) if torch.device(self.devices[j]) == torch.device(device))
            check(not shared, "generation.weight_transfer",
                  f"nccl needs every generator on a GPU of its own, and generator(s) {shared} would share the "
                  f"trainer's {device} (too few GPUs on this node); use generation.weight_transfer=gloo")
        self.nccl = NcclPlane(self.schema, device, n, spec.generation_cfg.model_shards()) if nccl else None
        self.hub: Hub | None = None
        self.procs: list[subprocess.Popen] = []
        self.probes = 0
        self.pending: Callable[[], None] | None = None  # waits for the push in flight

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        self.hub = Hub(self.n, self.timeout_s, host=run_host(self.host), rollout_types=(Generation,))
        self.hub.alive = self._death
        for j in range(self.n):
            self.hub.put_spec(j, replace(self.spec, rank=j, device=self.devices[j]))
        if self.local < self.n:
            self.secret_file = write_secret(self.hub.secret, self.hub.host, self.hub.store.port, secret_folder(self.secret_dir))
            if self.rendezvous is not None:
                write_json_atomic(self.rendezvous, {"address": self.hub.address, "secret_file": str(self.secret_file),
                                                    "generators": list(range(self.local, self.n))})
            print(f"[scalerl] waiting up to {self.timeout_s:g} s (async.timeout_s) for generators {self.local}.."
                  f"{self.n - 1}; start each with: {SECRET_ENV}=$(cat {self.secret_file}) python -m "
                  f"scalerl.generation.worker {self.hub.address} J", flush=True)
        for j in range(self.local):
            self.procs.append(spawn_child(
                [sys.executable, *self.worker, self.hub.address, str(j), str(self.timeout_s)],
                # no C++ stack dumps when the trainer goes; the run's secret in the environment, which only
                # this user can read (argv is world-readable)
                env={"TORCH_CPP_LOG_LEVEL": "ERROR", **os.environ, SECRET_ENV: self.hub.secret.hex()}))
        self.hub.connect()
        if self.nccl is not None:
            self.nccl.connect(self.hub)

    def _death(self, j: int) -> str | None:
        """The fast path for a child: its exit status (an external one has only its heartbeat)."""
        code = self.procs[j].poll() if j < len(self.procs) else None
        return None if code is None else f"(pid {self.procs[j].pid}) exited with code {code}"

    # ------------------------------------------------------------ the stream
    def order(self, job: int, step: int, min_version: int, shards: Sequence[Shard]) -> None:
        """Queue job ``job`` (a step's batch, or a refill of it): generator j generates ``shards[j]``
        with weights >= ``min_version``. Generators take queued jobs by step, then job."""
        self.hub.send("order", {"job": job, "step": step, "min_version": min_version, "shards": list(shards)})

    def push(self, version: int, state: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> float:
        """Send the trainer's weights to every generator, streamed: each tensor is cast to the
        generator's dtype straight into one of two bucket-sized buffers, and the buckets of one
        buffer are broadcast while the other is packed, so the push holds two buffers, never a
        copy of the model.

        ``state``: a dict, or ``(name, tensor)`` pairs in schema order, e.g.
        ``train.weights.trainer_tensors``, which gathers a sharded trainer's weights a group at a
        time while this consumes them (the pool's rank joins each gather as it packs).

        Memory against overlap: the weights are read while they are sent, so this returns only
        once every tensor is in a buffer, which is once all but the last two buffers' worth is
        through (each generator joins at its next decode step); the trainer's next optimizer step
        would change tensors not yet packed. The previous push packed a full copy and returned at
        once, its broadcast overlapping the next step: that copy (and one more per generator) was a
        model's worth of memory per push, which a large model on a trainer GPU cannot spare. The
        buckets of the last two buffers still go on while the trainer works (``settle`` waits for
        them). Returns the seconds the trainer was held up.

        With ``generation.weight_transfer=nccl`` the push goes from this rank's GPU straight to
        vLLM's workers instead (``vllm_nccl.NcclPlane``), no host buffers involved."""
        t = time.perf_counter()
        self.settle()
        named = in_order(self.layout, state)
        stage = f"pushing weights (version {version})"
        if self.nccl is not None:  # straight from this GPU to vLLM's workers (transfer/vllm_nccl.py)
            done = self.nccl.push(self.hub, version, named)
            self.pending = lambda: self.hub.wait(done, stage)
            return time.perf_counter() - t
        if not self.bufs:
            # CPU buffers: the gloo group sends from host memory (NCCL would want them on the GPU).
            self.bufs = [torch.empty(min(self.layout.bucket_bytes, packed_bytes(self.layout)), dtype=torch.uint8)
                         for _ in range(min(2, self.layout.n_buckets))]
        # Announced first: a generator enters the broadcast only after it has read this (transport.py).
        self.hub.send("push", {"version": version, "bucket_bytes": self.layout.bucket_bytes})
        held: list[list] = []  # the started broadcasts of each buffer's fill, oldest first

        def reuse(_b: int) -> None:  # a buffer is filled again: the fill before in it must be through
            held.append([])
            if len(held) > len(self.bufs):
                self.hub.finish(held.pop(0), stage)

        for _, bucket in pack(self.layout, named, self.bufs, reuse):
            held[-1] += self.hub.start_broadcast([bucket])
        self.pending = lambda: self.hub.finish([w for ws in held for w in ws], stage)
        return time.perf_counter() - t

    def settle(self) -> None:
        """Wait until the last push has reached every generator."""
        if self.pending is not None:
            wait, self.pending = self.pending, None
            wait()

    def collect(self, job: int, step: int) -> list[tuple[Generation, dict]]:
        """Every generator's shard of ``job`` with its header (its clock, its sampler's state), in rank order."""
        out = []
        for j in range(self.n):
            header, gen = self.hub.recv(j, f"done/{j}/{job}", job, f"waiting for step {step}'s rollout (job {job})")
            out.append((gen, header))
        return out

    def ready(self, job: int) -> bool:
        """Whether every shard of ``job`` has been generated (not yet received)."""
        return self.hub.has([f"done/{j}/{job}" for j in range(self.n)])

    def probe(self, ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """Each generator's next-token logits after the rows of ``ids`` (B, T): (B, V) per generator.
        The torch engine only: a vLLM engine returns log-probs of what it samples, not logits."""
        if not GENERATORS[self.spec.generation].schema.samples_policy:
            raise TypeError(f"generation={self.spec.generation}: the probe reads the torch engine's logits; check "
                            "this engine's pushes on the log-probs of what it samples (tests/test_vllm_pipeline.py)")
        self.settle()
        k = self.probes
        self.probes += 1
        self.hub.send("probe", {"id": k, "ids": ids.cpu(), "mask": mask.cpu()})
        return [self.hub.recv(j, f"probe/{j}/{k}", PROBE_TAG + k, "waiting for a probe's logits")[1] for j in range(self.n)]

    # ----------------------------------------------------------------- stop
    def close(self, grace_s: float = 30.0) -> None:
        """Ask the generators to stop, wait for them, then kill what is left."""
        self.pending = None  # the groups are aborted below: nothing to wait for
        if self.hub is not None:
            try:
                self.hub.send("stop")
            except Exception:  # the store is broken: the processes will notice on their own
                pass
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        if self.hub is not None:
            self._let_external_stop(deadline)
            self.hub.close()
        if self.secret_file is not None:
            self.secret_file.unlink(missing_ok=True)
        if self.rendezvous is not None:
            self.rendezvous.unlink(missing_ok=True)
        self.hub, self.procs, self.secret_file = None, [], None

    def _let_external_stop(self, deadline: float) -> None:
        """Give the external generators until ``deadline`` to read ``stop`` (their last beat says
        "stopped"): closing the store first would have them fail on the lost connection. One that
        does not (dead, unreachable) exits on that lost connection anyway."""
        def stopped(j: int) -> bool:
            try:
                b = self.hub.beat(j)
            except Exception:  # the store is broken: nothing more to wait for
                return True
            return b is None or b["state"] == "stopped"

        waiting = list(range(self.local, self.n))
        while waiting and time.monotonic() < deadline:
            waiting = [j for j in waiting if not stopped(j)]
            time.sleep(0.05)
