"""The road the trainer's weights take to whatever samples from them, chosen once by one table
(``run_plan.road_kind``) and built at set-up (``setup.build_road``); the schedule calls its
``publish(version)`` after every optimizer step.

The in-process engine (``Run.generator``: evaluation, and the training batches when the
trainer's process generates them) always holds the trainer's current version. It gets it
by one of three roads (``RoadEnd``):

- ``SharedModule``: the engine samples from the trainer's own module; nothing to copy, only
  the version moves (the torch engine on an unsharded trainer);
- ``Copy``: the engine samples from its own copy of the model, in the generator's dtype
  (an FSDP2-sharded trainer, ``sharding.py``): the full weights are copied in, in process;
- ``LoadWeights``: an engine with weights of its own gets them through
  ``Generator.load_weights`` (vLLM in the trainer's process; the torch engine with its own
  body dtype, ``precision.generator_body``).

Generators elsewhere (``Road.batches``) get the version when the interleaving pushes
(every ``Interleaving.push_every``-th version, arXiv 2510.13786 §3.1): an own-dtype sampler by
``LoadWeights``, generator processes by ``Remote`` (over gloo, or vLLM's gloo and NCCL planes:
``GeneratorPool.push``). Every road reads the weights through ``trainer_state_dict`` or
``trainer_tensors``, collective when the trainer is sharded: every rank publishes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Optional, Protocol

import torch

from scalerl.generation.fleet import GeneratorPool
from scalerl.generation.transfer import BUCKET_BYTES
from scalerl.train.sharding import copy_weights, full_state_dict, iter_full_tensors


class RoadEnd(Protocol):
    """One road's end: ``publish`` hands it the trainer's weights as ``version``; returns the
    seconds the trainer was held up."""

    def publish(self, version: int) -> float: ...


@dataclass
class SharedModule:
    """The engine samples from the trainer's own module: nothing to copy, just the version."""

    generator: object

    def publish(self, version: int) -> float:
        self.generator.version = version
        return 0.0


@dataclass
class Copy:
    """The engine samples from ``policy``, its own copy of the model (the trainer is sharded):
    the full weights are copied in (``sharding.copy_weights``)."""

    model: torch.nn.Module
    policy: object
    generator: object

    def publish(self, version: int) -> float:
        t = time.perf_counter()
        copy_weights(self.model, self.policy)
        self.generator.version = version
        return time.perf_counter() - t


@dataclass
class LoadWeights:
    """An engine with weights of its own: the trainer's full state dict through ``load_weights``."""

    model: torch.nn.Module
    generator: object

    def publish(self, version: int) -> float:
        t = time.perf_counter()
        self.generator.load_weights(trainer_state_dict(self.model).items(), version)
        return time.perf_counter() - t

    def release(self) -> None:
        """The engine's weights are not read again before the next ``publish``: free them meanwhile
        where the engine can (``TorchGenerator.release``)."""
        release = getattr(self.generator, "release", None)
        if release is not None:
            release()


@dataclass
class Remote:
    """Generator processes: every rank joins the gathers, a bucket at a time; rank 0 (``pool``;
    None elsewhere) streams each bucket to the generators in their dtype (``push_weights``)."""

    pool: Optional[GeneratorPool]
    model: torch.nn.Module
    dtype: str
    sharded: bool
    """The plan's (``RunPlan.sharded``): whether the trainer's tensors must be gathered."""

    def publish(self, version: int) -> float:
        return push_weights(self.pool, version, self.model, self.dtype, sharded=self.sharded)


@dataclass
class Road:
    """The run's road: the in-process ``engine`` at every version, then the generators
    elsewhere (``batches``, if any) at every ``push_every``-th version."""

    engine: RoadEnd
    batches: Optional[RoadEnd] = None
    push_every: int = 1
    """The interleaving's: PPO-off-policy-k pushes every k versions, PipelineRL every one (§3.1)."""

    def publish(self, version: int) -> float:
        """After an optimizer step. Returns the seconds the push to ``batches`` held the trainer up."""
        self.engine.publish(version)
        if self.batches is None or version % self.push_every:
            return 0.0
        return self.batches.publish(version)

    def start(self, version: int) -> float:
        """At the start or a resume: every end gets ``version``, whatever the interleaving."""
        self.engine.publish(version)
        return 0.0 if self.batches is None else self.batches.publish(version)


def trainer_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer, by name, unsharded (detached; do not mutate).
    Collective when the trainer is FSDP2-sharded: every rank must call it. A push needs no
    full copy: ``trainer_tensors`` streams the same tensors."""
    return full_state_dict(model)


def trainer_tensors(model: torch.nn.Module, dtype: torch.dtype | str | None = None,
                    bucket_bytes: int = BUCKET_BYTES, *, sharded: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` in state-dict order, full, gathered a group of at most ``bucket_bytes`` at
    a time (sharded ones cast to ``dtype``, the generator's, before the gather); a pair is dropped
    here once handed out, and is valid until the group after the next is gathered (the pool
    copies each into a bucket at once).
    Collective when ``sharded`` (the plan's: FSDP2 shards): every rank must exhaust it (``push_weights``)."""
    # Plain tensors come as they are (the module's own, detached): nothing to gather, and the pool
    # casts them straight into its buckets, so an unsharded push copies nothing more.
    if not sharded:
        yield from model.state_dict().items()
        return
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    # Sharded tensors are cast before their gather (fewer bytes).
    for group in iter_full_tensors(model, dtype, bucket_bytes):
        group.reverse()
        while group:  # hand each tensor over and forget it: the pool copies it into a bucket
            yield group.pop()


def push_weights(pool: GeneratorPool | None, version: int, model: torch.nn.Module, dtype: torch.dtype | str,
                 *, sharded: bool) -> float:
    """Push the trainer's weights as ``version`` to generator processes: every trainer rank calls
    this after its optimizer step; the rank with the pool (rank 0) sends, the others pass
    ``pool=None`` and only join the gathers. Returns the seconds this rank was held up."""
    if pool is not None:
        return pool.push(version, trainer_tensors(model, dtype, sharded=sharded))
    t = time.perf_counter()
    for _ in trainer_tensors(model, dtype, sharded=sharded):
        pass
    return time.perf_counter() - t
