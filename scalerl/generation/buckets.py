"""Weight pushes as named tensors: the schema both sides agree on, and the stream of
fixed-size buckets that carries them.

A push is the trainer's ``(name, tensor)`` pairs in schema order, each cast to
the dtype the generator holds (``TensorSpec.dtype``: a bf16 generator gets
bf16, so half the bytes travel and the generator copies instead of casting).
The tensors are laid end to end in one byte stream (each start aligned to
``ALIGN`` bytes, so a view of it can be any dtype), and the stream is cut into
buckets of ``bucket_bytes``: a tensor larger than a bucket, or one that
straddles a cut, simply spans several. Both sides derive the same ``Layout``
from the schema sent once at connection time and the bucket size announced
with each push, so nothing but the bytes travels.

Memory: the sender packs bucket k+1 while bucket k is being sent (two
buffers), the receiver gets one bucket at a time and hands out views of it (a
tensor cut in two is joined into a tensor of its own), so neither side holds
a copy of the model for a push (docs/async.md: pushes every step under
PipelineRL, arXiv 2510.13786 §3.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import torch

BUCKET_BYTES = 64 << 20
"""Bytes of one broadcast: a push holds two such buffers on the trainer, one on a generator."""
ALIGN = 16
"""Every tensor starts at a multiple of this in the stream (>= the largest element size)."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    """What travels (``bfloat16`` ...): the generator's own dtype for floating tensors."""

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.torch_dtype).element_size()


def weight_schema(state: Mapping[str, torch.Tensor], dtype: str | torch.dtype | None = None) -> list[TensorSpec]:
    """The push schema of ``state`` (shapes and dtypes only: a sharded DTensor is not gathered).
    ``dtype``: what floating tensors travel as (the generator's dtype); None keeps each tensor's."""
    cast = str(dtype).removeprefix("torch.") if dtype is not None else None

    def travels(t: torch.Tensor) -> str:
        return cast if cast is not None and t.is_floating_point() else str(t.dtype).removeprefix("torch.")

    return [TensorSpec(name, tuple(t.shape), travels(t)) for name, t in state.items()]


@dataclass(frozen=True)
class Layout:
    """Where every tensor of a push lies in its byte stream, and how the stream is cut."""

    specs: tuple[TensorSpec, ...]
    offsets: tuple[int, ...]
    """Byte offset of each tensor in the stream (multiples of ``ALIGN``)."""
    total: int
    bucket_bytes: int

    @property
    def n_buckets(self) -> int:
        return -(-self.total // self.bucket_bytes)

    def bucket_size(self, k: int) -> int:
        return min(self.bucket_bytes, self.total - k * self.bucket_bytes)

    def pieces(self, i: int) -> Iterator[tuple[int, int, int, int]]:
        """Tensor i's parts: ``(bucket k, byte offset in bucket k, start, stop)`` with start/stop
        its own byte range. Cuts fall on element boundaries (``layout`` checks the bucket size)."""
        at, end = self.offsets[i], self.offsets[i] + self.specs[i].nbytes
        while at < end:
            k, off = divmod(at, self.bucket_bytes)
            n = min(end - at, self.bucket_bytes - off)
            yield k, off, at - self.offsets[i], at - self.offsets[i] + n
            at += n


def _check_bucket_bytes(bucket_bytes: int) -> None:
    if bucket_bytes <= 0 or bucket_bytes % ALIGN:
        raise ValueError(f"weight push: the bucket size must be a positive multiple of {ALIGN} bytes, got {bucket_bytes}")


def layout(schema: Sequence[TensorSpec], bucket_bytes: int = BUCKET_BYTES) -> Layout:
    _check_bucket_bytes(bucket_bytes)
    offsets, at = [], 0
    for s in schema:
        offsets.append(at)
        at += -(-s.nbytes // ALIGN) * ALIGN
    total = offsets[-1] + schema[-1].nbytes if schema else 0
    return Layout(tuple(schema), tuple(offsets), total, bucket_bytes)


def in_order(plan: Layout, state: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]
             ) -> Iterator[tuple[int, torch.Tensor]]:
    """``(index in the schema, tensor)`` for a dict (taken in schema order; its names are checked
    here, before anything is announced) or for ``(name, tensor)`` pairs, which must come in schema
    order (each is checked as it comes: a gathering iterator cannot be read ahead)."""
    if isinstance(state, Mapping):
        missing = [s.name for s in plan.specs if s.name not in state]
        if missing:
            raise KeyError(f"weight push: the state lacks {missing[:3]} of the push schema")
        state = [(s.name, state[s.name]) for s in plan.specs]
    return _checked(plan, iter(state))


def _checked(plan: Layout, pairs: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[int, torch.Tensor]]:
    n = 0
    for i, (name, t) in enumerate(pairs):
        if i >= len(plan.specs) or name != plan.specs[i].name:
            want = repr(plan.specs[i].name) if i < len(plan.specs) else "nothing (the schema has ended)"
            raise ValueError(f"weight push: got {name!r} at position {i}, the schema's is {want}")
        if tuple(t.shape) != plan.specs[i].shape:
            raise ValueError(f"weight push: {name} has shape {tuple(t.shape)}, the schema says {plan.specs[i].shape}")
        yield i, t
        del t  # not held while the next one is gathered
        n += 1
    if n != len(plan.specs):
        raise ValueError(f"weight push: got {n} tensors, the schema has {len(plan.specs)}")


def pack(plan: Layout, named: Iterable[tuple[int, torch.Tensor]], bufs: Sequence[torch.Tensor]
         ) -> Iterator[tuple[int, torch.Tensor]]:
    """Copy the tensors (``in_order``'s pairs) into buckets, cast to the schema's dtypes, bucket k
    in ``bufs[k % len(bufs)]`` (uint8, ``bucket_bytes`` each); yields ``(k, bucket k)`` once it is
    full. The caller must be done with bucket k+1-len(bufs) (its buffer is next) before it
    resumes the iterator."""
    k = 0
    for i, t in named:
        spec = plan.specs[i]
        flat, size = t.detach().reshape(-1), spec.nbytes // max(spec.numel, 1)
        for kb, off, a, b in plan.pieces(i):
            while k < kb:  # every bucket before kb is complete
                yield k, bufs[k % len(bufs)][: plan.bucket_size(k)]
                k += 1
            # Cast piece by piece straight into the bucket: no cast copy of a whole tensor (an
            # embedding is the largest). From a GPU tensor into a CPU bucket this is a synchronous
            # device-to-host copy, so the bucket is complete when it is yielded (gloo stages through
            # CPU; an NCCL broadcast would take buckets on the GPU: not done, it needs two GPUs).
            bufs[kb % len(bufs)][off : off + b - a].view(spec.torch_dtype).copy_(flat[a // size : b // size])
        del t, flat  # a gathered tensor goes before the next is gathered
    while k < plan.n_buckets:
        yield k, bufs[k % len(bufs)][: plan.bucket_size(k)]
        k += 1


def pack_all(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES
             ) -> tuple[list[TensorSpec], list[torch.Tensor]]:
    """A snapshot of ``(name, tensor)`` pairs as the schema they make and all of their buckets, for
    a sender that must hold the bytes until a later moment (vLLM's relay: an update lands between two
    decode steps, the pairs arrive before). The bytes are those ``layout(schema, bucket_bytes)``
    describes, so ``unpack`` reads them back; built as the pairs come, with no schema in advance."""
    _check_bucket_bytes(bucket_bytes)
    schema: list[TensorSpec] = []
    bufs: list[torch.Tensor] = []
    at = 0
    for name, t in named:
        spec = TensorSpec(name, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        at = -(-at // ALIGN) * ALIGN  # where layout() puts it
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8) if spec.numel else torch.empty(0, dtype=torch.uint8)
        done = 0
        while done < raw.numel():
            k, off = divmod(at, bucket_bytes)
            while len(bufs) <= k:
                bufs.append(torch.empty(bucket_bytes, dtype=torch.uint8))
            n = min(raw.numel() - done, bucket_bytes - off)
            bufs[k][off : off + n].copy_(raw[done : done + n])
            done, at = done + n, at + n
        schema.append(spec)
    plan = layout(schema, bucket_bytes)
    assert plan.total == at, (plan.total, at)
    while len(bufs) < plan.n_buckets:  # only an empty last tensor, aligned past the last byte, ends here
        bufs.append(torch.zeros(bucket_bytes, dtype=torch.uint8))
    return schema, [b[: plan.bucket_size(k)] for k, b in enumerate(bufs)]


def unpack(plan: Layout, recv: Callable[[torch.Tensor], Callable[[], None]]) -> Iterator[tuple[str, torch.Tensor]]:
    """The pushed ``(name, tensor)`` pairs in schema order, receiving bucket by bucket.

    ``recv(buf)`` starts receiving the next bucket into ``buf`` and returns the function that
    waits for it: bucket k+1 is already arriving while the consumer copies bucket k's tensors.
    A tensor inside one bucket is a view of it, valid as long as it is referenced: a bucket's
    buffer is reused for a later bucket only once no view of it is alive (an engine that copies
    each tensor at once, the torch one, cycles through three buffers; one that keeps views for a
    while, vLLM's chunking, gets fresh ones). A tensor cut across buckets is joined into its own."""
    pending: list = []  # (buffer, bucket view, wait) of the buckets on their way
    spare: list[torch.Tensor] = []  # buffers of consumed buckets

    def start(k: int) -> None:
        buf = next((spare.pop(i) for i, b in enumerate(spare) if _alone(b)), None)
        if buf is None:
            buf = torch.empty(plan.bucket_bytes, dtype=torch.uint8)
        view = buf[: plan.bucket_size(k)]
        pending.append((buf, view, recv(view)))

    if plan.n_buckets:
        start(0)
    k, cur, cur_buf = -1, None, None

    def advance() -> None:
        nonlocal k, cur, cur_buf
        if cur_buf is not None:
            spare.append(cur_buf)
            del spare[:-2]  # keep two: a third would be one an engine still holds views of
        cur = None
        cur_buf, cur, wait = pending.pop(0)
        wait()
        k += 1
        if k + 1 < plan.n_buckets:
            start(k + 1)

    for i, spec in enumerate(plan.specs):
        parts = list(plan.pieces(i))
        joined = torch.empty(spec.nbytes, dtype=torch.uint8) if len(parts) > 1 else None
        out = joined if joined is not None else torch.empty(0, dtype=torch.uint8)  # (an empty tensor has no part)
        for kb, off, a, b in parts:
            while k < kb:
                advance()
            if joined is None:
                out = cur[off : off + b - a]
            else:
                joined[a:b].copy_(cur[off : off + b - a])
        yield spec.name, out.view(spec.torch_dtype).view(spec.shape)
        del out, joined
    while k + 1 < plan.n_buckets:  # trailing buckets (none in a well-formed layout): keep the collective whole
        advance()


def _alone(buf: torch.Tensor) -> bool:
    """Whether nothing but ``buf`` itself holds its memory (no view of it is alive). Reads the
    storage's reference count through a private torch hook; without it, never reuse."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return False
    alone = torch.empty(1)
    return count(buf.untyped_storage()._cdata) <= count(alone.untyped_storage()._cdata)
