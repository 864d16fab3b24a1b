"""Generator processes seen from the trainer: start them, order batches, push
weights, collect rollouts, stop them.

Each generator is a plain ``python -m scalerl.generation.worker`` process that
connects back to the trainer's ``Hub`` (``transport.py``), so the same worker
could be started on another node. The pool knows nothing of tasks, rewards or
the training loop: orders are token ids and sampling settings, replies are
``Generation`` shards with the generator's clock.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from typing import Mapping, Sequence

import torch

from scalerl.generation import GENERATORS
from scalerl.generation.interface import Generation
from scalerl.generation.transport import PROBE_TAG, SECRET_ENV, Hub
from scalerl.generation.weights import buckets, empty_buffers, pack, weight_schema
from scalerl.generation.worker import Shard, WorkerSpec


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _death_signal():
    """A preexec_fn that has the kernel SIGKILL the child when its parent dies (Linux), or None.

    A trainer killed with kill -9 while its generators start up would otherwise leave them
    waiting out two 300 s store timeouts (issue 29). The signal fires when the thread that
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


class GeneratorPool:
    worker = ("-m", "scalerl.generation.worker")
    """The generator's command after the interpreter (a test's paced worker replaces it)."""

    def __init__(self, spec: WorkerSpec, n: int, state: Mapping[str, torch.Tensor], devices: Sequence[str] = ()):
        """``spec``: the settings every generator shares (rank and schema are filled in here);
        ``state``: the trainer's weights (their names, shapes and dtypes fix the push schema);
        ``devices``: generator j's device (default: the spec's)."""
        self.n, self.timeout_s = n, spec.timeout_s
        self.devices = list(devices) or [spec.device] * n
        self.schema = tuple(weight_schema(state))
        self.spec = replace(spec, schema=self.schema, n_generators=n)
        self.buckets = buckets(self.schema)
        self.bufs = empty_buffers(self.buckets)
        self.hub: Hub | None = None
        self.procs: list[subprocess.Popen] = []
        self.probes = 0
        self.pending = None  # the push in flight: (works, stage)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        self.hub = Hub(self.n, self.timeout_s, rollout_types=(Generation,))
        self.hub.alive = self._death
        for j in range(self.n):
            self.hub.put_spec(j, replace(self.spec, rank=j, device=self.devices[j]))
            self.procs.append(spawn_child(
                [sys.executable, *self.worker, self.hub.address, str(j), str(self.timeout_s)],
                # no C++ stack dumps when the trainer goes; the run's secret in the environment, which only
                # this user can read (argv is world-readable)
                env={"TORCH_CPP_LOG_LEVEL": "ERROR", **os.environ, SECRET_ENV: self.hub.secret.hex()}))
        self.hub.connect()

    def _death(self, j: int) -> str | None:
        code = self.procs[j].poll() if j < len(self.procs) else None
        return None if code is None else f"(pid {self.procs[j].pid}) exited with code {code}"

    # ------------------------------------------------------------ the stream
    def order(self, job: int, step: int, min_version: int, shards: Sequence[Shard]) -> None:
        """Queue job ``job`` (a step's batch, or a refill of it): generator j generates ``shards[j]``
        with weights >= ``min_version``. Generators take queued jobs by step, then job."""
        self.hub.send("order", {"job": job, "step": step, "min_version": min_version, "shards": list(shards)})

    def push(self, version: int, state: Mapping[str, torch.Tensor]) -> float:
        """Send the trainer's weights to every generator. The broadcast goes on while the trainer
        works (each generator joins at its next decode step); the next push first waits for it,
        since it reuses the buffers. Returns the seconds the trainer was held up."""
        t = time.perf_counter()
        self.settle()
        pack(state, self.buckets, self.bufs)
        self.hub.send("push", {"version": version})
        self.pending = (self.hub.start_broadcast(self.bufs), f"pushing weights (version {version})")
        return time.perf_counter() - t

    def settle(self) -> None:
        """Wait until the last push has reached every generator."""
        if self.pending is not None:
            works, stage = self.pending
            self.pending = None
            self.hub.finish(works, stage)

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
            self.hub.close()
        self.hub, self.procs = None, []
