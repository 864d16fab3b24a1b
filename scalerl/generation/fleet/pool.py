"""Generator processes seen from the trainer: start them, order batches, push
weights, collect rollouts, stop them.

Each generator is a plain ``python -m scalerl.generation.worker`` process that
connects back to the trainer's ``Hub`` (``transport.py``) at the run's address.
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
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import torch

from scalerl.core.errors import check
from scalerl.core.jsonio import write_json_atomic
from scalerl.generation.engines import GENERATORS
from scalerl.generation.engines.interface import Generation
from scalerl.generation.fleet.transport import PROBE_TAG, Hub
from scalerl.generation.transfer.trust import SECRET_ENV, run_host
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


def secret_folder(secret_dir: str | Path | None = None) -> Path:
    return Path(secret_dir or Path.home() / ".scalerl" / "secrets")


def job_rendezvous(secret_dir: str | Path | None = None, env: Mapping[str, str] = os.environ) -> Path | None:
    """Where the trainer of a SLURM job tells the job's generator nodes how to join (its address
    and the secret file's path): keyed by the job and its restart count, so a requeued job's
    generators never read the address of the attempt before. None outside SLURM."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    return secret_folder(secret_dir) / f"job-{job}.{env.get('SLURM_RESTART_COUNT', '0')}.json"


def write_secret(hub: Hub, folder: Path) -> Path:
    """The run's secret in a file only this user can read (a 0700 folder, a 0600 file), for an
    operator starting generators elsewhere: a log line or argv would be world-readable. In the
    home folder by default, which a cluster's nodes usually share."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / f"generators-{hub.host.replace(':', '_')}-{hub.store.port}.hex"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(hub.secret.hex())
    return path


def spawn_child(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    """Start a generator process that dies with this one, whatever the moment."""
    return subprocess.Popen(list(argv), env=dict(env), preexec_fn=_death_signal())


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
            self.secret_file = write_secret(self.hub, secret_folder(self.secret_dir))
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
