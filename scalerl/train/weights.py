"""The trainer's weights as a push sends them: full, unsharded, by name.

``trainer_tensors`` is the one call every trainer rank makes for a push; the rank
that owns the generator pool hands the pairs to ``GeneratorPool.push``, the others
join its gathers (``push_weights``). A group at a time: no rank holds the whole
model for a push (``train/sharding.py``).
"""
from __future__ import annotations

import time
from typing import Iterator

import torch
from torch.distributed.tensor import DTensor

from scalerl.generation.fleet import GeneratorPool
from scalerl.generation.transfer import BUCKET_BYTES
from scalerl.train.sharding import full_state_dict, iter_full_tensors


def trainer_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer, by name, unsharded (detached; do not mutate).
    Collective when the trainer is FSDP2-sharded: every rank must call it. A push needs no
    full copy: ``trainer_tensors`` streams the same tensors."""
    return full_state_dict(model)


def trainer_tensors(model: torch.nn.Module, dtype: torch.dtype | str | None = None,
                    bucket_bytes: int = BUCKET_BYTES) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` in state-dict order, full, gathered a group of at most ``bucket_bytes`` at
    a time (sharded ones cast to ``dtype``, the generator's, before the gather); a pair is dropped
    here once handed out, and is valid until the group after the next is gathered (the pool
    copies each into a bucket at once).
    Collective when sharded: every rank must exhaust it (``push_weights``)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    # Sharded tensors are cast before their gather (fewer bytes); plain ones come as they are:
    # the pool casts them straight into its buckets, so an unsharded push copies nothing more.
    if not any(isinstance(t, DTensor) for t in model.state_dict().values()):
        dtype = None
    for group in iter_full_tensors(model, dtype, bucket_bytes):
        group.reverse()
        while group:  # hand each tensor over and forget it: the pool copies it into a bucket
            yield group.pop()


def push_weights(pool: GeneratorPool | None, version: int, model: torch.nn.Module, dtype: torch.dtype | str) -> float:
    """Push the trainer's weights as ``version``: every trainer rank calls this after its optimizer
    step; the rank with the pool (rank 0) sends, the others pass ``pool=None`` and only join the
    gathers. Returns the seconds this rank was held up."""
    if pool is not None:
        return pool.push(version, trainer_tensors(model, dtype))
    t = time.perf_counter()
    for _ in trainer_tensors(model, dtype):
        pass
    return time.perf_counter() - t
