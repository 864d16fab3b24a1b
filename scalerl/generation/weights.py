"""Weight pushes as named tensors: the schema both sides agree on, and the flat
buckets that travel.

A push is ``(version, [(name, tensor), ...])`` in the trainer's dtype. To move
it in few messages, the tensors are laid end to end in flat buffers (one per
dtype, split at ``bucket_bytes``), in the order of a schema sent once at
connection time; the receiver gets views of the buckets back by name and casts
them into its own weights (a generator's precision is its own). A vLLM engine
would take the same ``(name, view)`` pairs in its ``load_weights``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import torch

BUCKET_BYTES = 256 << 20
"""Largest flat buffer of one push (bounds the staging memory of big models)."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    """The trainer's dtype (``float32`` ...): what travels; the receiver casts."""

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Bucket:
    dtype: str
    specs: tuple[TensorSpec, ...]

    @property
    def numel(self) -> int:
        return sum(s.numel for s in self.specs)


def weight_schema(state: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in state.items()]


def buckets(schema: Sequence[TensorSpec], bucket_bytes: int = BUCKET_BYTES) -> list[Bucket]:
    """Group the schema into dtype-homogeneous buckets of at most ``bucket_bytes`` (a larger
    tensor gets a bucket of its own), keeping the schema order within each dtype."""
    out: list[Bucket] = []
    for dtype in dict.fromkeys(s.dtype for s in schema):
        size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        current: list[TensorSpec] = []
        used = 0
        for s in (s for s in schema if s.dtype == dtype):
            if current and used + s.numel * size > bucket_bytes:
                out.append(Bucket(dtype, tuple(current)))
                current, used = [], 0
            current.append(s)
            used += s.numel * size
        if current:
            out.append(Bucket(dtype, tuple(current)))
    return out


def empty_buffers(plan: Sequence[Bucket]) -> list[torch.Tensor]:
    """Receive buffers for ``plan`` (CPU)."""
    return [torch.empty(b.numel, dtype=getattr(torch, b.dtype)) for b in plan]


def pack(state: Mapping[str, torch.Tensor], plan: Sequence[Bucket], out: Sequence[torch.Tensor]) -> None:
    """Copy ``state`` into the flat buffers ``out`` (one per bucket, from ``empty_buffers``)."""
    for bucket, buf in zip(plan, out):
        at = 0
        for s in bucket.specs:
            t = state[s.name]
            if tuple(t.shape) != s.shape:
                raise ValueError(f"weight push: {s.name} has shape {tuple(t.shape)}, the schema says {s.shape}")
            buf[at : at + s.numel].copy_(t.detach().reshape(-1))
            at += s.numel


def unpack(plan: Sequence[Bucket], bufs: Sequence[torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, view)`` for every tensor of the received buffers, in schema order (no copy)."""
    for bucket, buf in zip(plan, bufs):
        at = 0
        for s in bucket.specs:
            yield s.name, buf[at : at + s.numel].view(s.shape)
            at += s.numel
