"""The generator process: its own copy of the weights, in its own precision.

    python -m scalerl.generation.worker HOST:PORT RANK [TIMEOUT_S]

(the run's secret in ``$SCALERL_TRANSPORT_SECRET``) connects to a trainer's hub (``pool.Hub``), fetches its ``WorkerSpec``,
builds the run's generation engine (the ``generation`` option, through the
``GENERATORS`` registry: the torch engine over its own copy of the checkpoint,
or a vLLM engine) in the generator's own dtype with the precision axis's
generator-side head, waits for the trainer's weights, then serves the control
stream in order:

- ``order``: generate one job's shard (a step's batch, or a refill of it),
  once its weights are new enough for the lag bound (``min_version``), and send
  it back, each token tagged with the version that produced it; queued jobs
  are taken by step, so a refill goes before later steps;
- ``push``: receive new weights (a broadcast) and swap them in, between decode
  steps when the run allows in-flight updates (PipelineRL, arXiv 2510.13786
  §3.1): sequences in flight and their KV cache are kept; with vLLM's NCCL data
  plane the broadcast goes to vLLM's workers, joined once (``weights_group``);
- ``probe``: return the generator-side logits of given inputs (checks that a
  push arrived exactly; the torch engine only: a vLLM engine exposes log-probs
  of what it samples, not logits, and its pushes are checked on those);
- ``stop``: exit.

Locally the trainer starts these processes itself (``pool.py``); with
``async.external_generators`` an operator runs the same command on other nodes,
given the address and index the trainer prints and the run's secret from the
file it names (docs/async.md; ``transport.py``: every message is signed with it;
a network namespace apart is tested, other machines are not). ``TIMEOUT_S``
bounds joining (default ``JOIN_TIMEOUT_S``); after that the spec's
``async.timeout_s`` applies. A heartbeat thread tells the trainer this process
lives (``Spoke.start_heartbeat``) and, when the trainer's store goes away, makes
it stop at its next decode step or wait.
SIGINT/SIGTERM/SIGUSR2 are ignored: the trainer stops its
generators after it has checkpointed, and a generator whose trainer died exits
when the store connection drops.
"""
from __future__ import annotations

import datetime
import heapq
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from scalerl.generation.engines import GENERATORS
from scalerl.generation.engines.base import EngineContext
from scalerl.generation.engines.interface import SamplingParams
from scalerl.generation.fleet.transport import PROBE_TAG, Spoke, TransportError, poll_until
from scalerl.generation.transfer.trust import secret_from_env
from scalerl.generation.transfer.buckets import TensorSpec, lay_out, unpack
from scalerl.generation.transfer.vllm_nccl import entered_key, joining_key, update_info
from scalerl.models.load import load_model
from scalerl.models.policy import Policy, positions_from_mask
from scalerl.precision import PRECISIONS


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one generator process needs, sent through the store at start-up."""

    rank: int
    n_generators: int
    checkpoint: str
    device: str
    dtype: str
    """The generator's body dtype (its own precision; may differ from the trainer's)."""
    compute_dtype: str
    heads: Callable
    """The precision axis's ``HeadsFn`` with its config bound (a picklable partial)."""
    attn_implementation: Optional[str]
    threads: int
    timeout_s: float
    in_flight: bool
    schema: tuple[TensorSpec, ...]
    """The trainer's weights, in push order."""
    generation: str = "torch"
    """The engine: a ``GENERATORS`` key (the run's ``generation`` option)."""
    generation_cfg: Any = None
    """Its option config, as a plain (picklable) schema instance; None: the schema's defaults."""
    seed: int = 0
    """The run's seed (an engine's own seed; every request carries its prompt's seed too)."""
    lean: bool = False
    """The model is scalerl's own module (``RunPlan.lean``), as in the trainer."""


@dataclass
class Shard:
    """This generator's part of one step's batch."""

    prompts: list[list[int]]
    params: SamplingParams
    """Its rows' settings, per-prompt sampling seeds included: a completion does not depend
    on which generator produced it (``noise.py``)."""


JOIN_TIMEOUT_S = 300.0
"""How long a generator started by hand waits for the trainer's store and its spec."""


class _Stopped(Exception):
    pass


def wire_types() -> tuple[tuple[type, ...], tuple[Callable, ...]]:
    """What the spec and control messages may hold (``wire.decode`` builds nothing else):
    this module's dataclasses, the options' config schemas, and the precision axis's functions."""
    schemas = [o.schema for o in (*GENERATORS.values(), *PRECISIONS.values())]
    return (WorkerSpec, TensorSpec, Shard, SamplingParams, *schemas), tuple(o.fn for o in PRECISIONS.values())


class GeneratorServer:
    def __init__(self, spoke: Spoke, spec: WorkerSpec):
        self.spoke, self.spec = spoke, spec
        torch.set_num_threads(spec.threads)
        self.generator = build_engine(spec)
        policy = getattr(self.generator, "policy", None)
        self.weights = dict(policy.model.state_dict()) if policy is not None else {}
        """The engine's own tensors by name, when its model lives in this process (the torch engine):
        a push's large tensors are received straight into them (``buckets.unpack``'s ``into``)."""
        own_pages(self.weights.values())
        self.version: Optional[int] = None
        self.orders: list = []  # heap of (step, job, min_version, shard)
        self.stopping = False
        self.marked = -1
        self.t0, self.idle_s, self.push_s = time.monotonic(), 0.0, 0.0

    # -------------------------------------------------------------- messages
    def drain(self) -> None:
        """Handle every control message the trainer has sent so far, in order."""
        while (msg := self.spoke.poll()) is not None:
            kind, payload = msg
            if kind == "order":
                heapq.heappush(self.orders, (payload["step"], payload["job"], payload["min_version"],
                                             payload["shards"][self.spec.rank]))
            elif kind == "weights_group":  # vLLM's nccl data plane: join the trainer's NCCL group (vllm_nccl.py)
                self.spoke.tell(joining_key(self.spec.rank))  # the trainer joins once every generator says so
                self.generator.join_weight_group(payload["init_info"][self.spec.rank])
            elif kind == "push" and payload.get("transfer") == "nccl":
                t = time.monotonic()
                # The bytes go from the trainer's GPU to vLLM's workers; this process relays vLLM's calls.
                # Said before entering: the trainer starts gathering and broadcasting only after it.
                self.spoke.tell(entered_key(self.spec.rank, payload["version"]))
                self.generator.receive_broadcast(update_info(self.spec.schema), payload["version"])
                self.version = payload["version"]
                self.push_s += time.monotonic() - t
            elif kind == "push":
                t = time.monotonic()
                # Bucket by bucket into the engine: one bucket (and the next arriving) in memory,
                # no full-model receive buffer, and a large tensor straight into its weights, with
                # no copy (buckets.py). Whatever the engine leaves unread is still received: every
                # generator must take every bucket of the broadcast.
                named = unpack(lay_out(self.spec.schema, payload["bucket_bytes"]),
                               lambda b: self.spoke.recv_broadcast([b]), into=lambda s: self.weights.get(s.name))
                self.generator.load_weights(named, payload["version"])
                for _ in named:
                    pass
                self.version = payload["version"]
                self.push_s += time.monotonic() - t
            elif kind == "probe":
                self.spoke.send(f"probe/{self.spec.rank}/{payload['id']}", PROBE_TAG + payload["id"], {},
                                self.logits(payload["ids"], payload["mask"]))
            elif kind == "stop":
                self.stopping = True

    def wait_for(self, cond: Callable[[], bool], stage: str) -> None:
        """Block (handling messages) until ``cond()`` or a stop; idle time is accounted."""
        self.drain()
        if cond() or self.stopping:
            return
        self.spoke.set_state(stage)
        t = time.monotonic()

        def ready() -> bool:
            self.check_trainer()
            self.drain()
            ok = cond() or self.stopping
            if not ok and self.version is not None and self.marked != self.version + 1:
                self.marked = self.version + 1  # nothing more to do here until the next version
                self.spoke.mark_blocked(self.marked)
            return ok

        poll_until(ready, timeout_s=self.spec.timeout_s, stage=f"generator {self.spec.rank}: {stage}")
        self.idle_s += time.monotonic() - t
        self.spoke.set_state("generating")

    # ------------------------------------------------------------------ work
    def run(self) -> None:
        """Serve orders back to back: after a shard, the next queued one (by step, then job) starts
        at once if its weights are new enough; idle time is only waiting for an order or weights.

        One shard per ``generate`` call, not every ready order in one batch: a batch left-pads its
        prompts to its longest, and the padding width changes the attention's reductions in the
        last bits (a 5e-7 log-prob difference on the tiny model), so a merged completion would no
        longer depend on its prompt's seed alone (``SamplingParams.seeds``), and the bit-for-bit
        checks (``max_lag=0`` equals ``sync``) would hold only while one order is ready at a time.
        Nor would it buy throughput at the default ``async.lookahead=1``, where at most one order
        is waiting when a shard ends (docs/async.md, 'Lookahead')."""
        self.wait_for(lambda: self.version is not None, "waiting for the trainer's initial weights")
        while True:
            self.wait_for(lambda: bool(self.orders), "waiting for an order")
            if self.stopping:
                return
            step, job, min_version, shard = heapq.heappop(self.orders)
            min_version = self.weights_floor(step, min_version)
            self.wait_for(lambda: self.version >= min_version, f"step {step}: lag bound, waiting for weights >= {min_version}")
            if self.stopping:
                return
            try:
                gen = self.generator.generate(shard.prompts, shard.params,
                                              between_steps=lambda t: self.between_steps(step, t))
            except _Stopped:
                return
            elapsed = time.monotonic() - self.t0
            # Sent on the CPU: pickled CUDA tensors would come back on the trainer's device of the same
            # index, which with CUDA_VISIBLE_DEVICES remapped (vLLM) is not this process's GPU.
            self.spoke.send(f"done/{self.spec.rank}/{job}", job, {"idle_s": self.idle_s, "push_s": self.push_s,
                                                               "elapsed_s": elapsed}, gen.to("cpu"))

    def weights_floor(self, step: int, min_version: int) -> int:
        """The oldest weights that may start ``step``'s shard: the trainer's lag bound. (A test's
        subclass raises it to pin a schedule: tests/paced_worker.py.)"""
        return min_version

    def check_trainer(self) -> None:
        """Stop when the heartbeat thread lost the trainer's store (nobody will read what this makes)."""
        if self.spoke.lost:
            raise TransportError(f"generator {self.spec.rank}: {self.spoke.lost}; stopping")

    def between_steps(self, step: int, t: int) -> None:
        self.check_trainer()
        if self.spec.in_flight:
            self.drain()  # a push announced now is swapped in before this decode step
        if self.stopping:
            raise _Stopped

    @torch.no_grad()
    def logits(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Generator-side next-token logits after each row of ``ids`` (B, T) -> (B, V)."""
        pol, dev = getattr(self.generator, "policy", None), self.generator.device
        if pol is None:
            raise TypeError(f"generation={self.spec.generation}: the probe reads logits from the torch engine's "
                            "model, which this engine does not expose; check its pushes on the log-probs of what "
                            "it samples (tests/test_vllm_pipeline.py)")
        ids, mask = ids.to(dev), mask.to(dev)
        # Through a fresh cache, as the sampler's prefill: the probe checks the path that samples.
        h, _ = pol.hidden(ids, mask, positions_from_mask(mask), cache=pol.new_cache(ids.shape[1]))
        return pol.logits(h[:, -1], side="gen").cpu()


def own_pages(tensors, chunk: int = 16 << 20) -> None:
    """Write each tensor's bytes back onto itself, once, at start-up. A checkpoint loaded in its own
    dtype is mapped from the file (copy-on-write), so the first write to each page copies it: done
    here, by torch, rather than inside the first push's socket reads, where those faults made the
    first push of a Qwen2-0.5B shape 4 s against 0.8 s (benchmarks/RESULTS.md, 2026-12-02). The
    values and the addresses stay as they are (a moved weight changed the last bits of a run)."""
    seen = set()
    for t in tensors:
        if t.device.type != "cpu" or not t.is_contiguous() or t.data_ptr() in seen or not t.numel():
            continue
        seen.add(t.data_ptr())
        raw = t.detach().reshape(-1).view(torch.uint8)
        for a in range(0, raw.numel(), chunk):
            raw[a : a + chunk].copy_(raw[a : a + chunk].clone())


def build_engine(spec: WorkerSpec):
    """The run's ``generation`` engine in this process, from the spec: built like the trainer's
    in-process one (``train/setup.py``), but in the generator's own body dtype and head."""
    option = GENERATORS[spec.generation]
    cfg = spec.generation_cfg if spec.generation_cfg is not None else option.schema()
    device, body = torch.device(spec.device), getattr(torch, spec.dtype)
    heads = spec.heads(getattr(torch, spec.compute_dtype))
    policy = None
    if option.schema.samples_policy:  # an in-process sampler: its own copy of the checkpoint
        model = load_model(spec.checkpoint, dtype=body, device=device,
                           attn_implementation=spec.attn_implementation, lean=spec.lean)
        model.eval()
        missing = {s.name for s in spec.schema} - set(model.state_dict())
        if missing:
            raise KeyError(f"the generator's model lacks {sorted(missing)[:3]} of the trainer's weights")
        policy = Policy(model, gen_head=heads.gen, train_head=heads.gen)
    elif device.type == "cuda" and device.index is not None:
        # An engine that starts its own processes (vLLM) uses the first visible GPU: make that this
        # generator's (nothing in this process has touched CUDA yet). Untested here: no GPU.
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(device.index + 1)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[device.index]
        device = torch.device("cuda", 0)
    rounds = heads.gen_round_dtype not in (None, body)  # generator_body=engine: bf16 weights (docs/mismatch.md)
    ctx = EngineContext(policy=policy, checkpoint=Path(spec.checkpoint), device=device, body_dtype=body,
                        head_dtype=heads.gen_dtype, seed=spec.seed, round_to=heads.gen_round_dtype if rounds else None)
    return option.fn(ctx, cfg=cfg)


def main(argv: list[str], server_cls: type[GeneratorServer] = GeneratorServer) -> int:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
        signal.signal(s, signal.SIG_IGN)  # the trainer decides when this process stops
    if len(argv) not in (2, 3):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    address, rank = argv[0], int(argv[1])
    timeout_s = float(argv[2]) if len(argv) > 2 else JOIN_TIMEOUT_S
    spoke = None
    try:
        types, functions = wire_types()
        spoke = Spoke(address, rank, timeout_s, secret_from_env(), message_types=types, functions=functions)
        spec = spoke.spec()
        spoke.timeout_s = spec.timeout_s  # the run's own deadline from here on
        spoke.store.set_timeout(datetime.timedelta(seconds=spec.timeout_s))
        spoke.start_heartbeat()  # before the model loads: that can take a while, and it is alive
        server = server_cls(spoke, spec)
        spoke.connect(spec.n_generators)
        print(f"[scalerl] generator {rank} ready: pid {os.getpid()}, {spec.device}, {spec.dtype} body, "
              f"{spec.threads} thread(s)", flush=True)
        try:
            server.run()
        finally:
            server.generator.close()  # an engine's own processes (vLLM) go with this one
        return 0
    except TransportError as e:
        if spoke is not None:
            spoke.report_error(str(e))
        print(f"[scalerl] {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:
        if isinstance(e, torch.distributed.DistNetworkError):
            print(f"[scalerl] generator {rank}: lost the trainer at {address} ({str(e).splitlines()[0]}); stopping",
                  file=sys.stderr, flush=True)
            return 1
        text = traceback.format_exc()
        if spoke is not None:
            spoke.report_error(f"{type(e).__name__}: {e}\n{text[-3000:]}")
        print(text, file=sys.stderr, flush=True)
        return 1
    finally:
        if spoke is not None:
            spoke.close()

