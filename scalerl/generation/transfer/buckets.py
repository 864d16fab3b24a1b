"""Weight pushes as named tensors: the schema both sides agree on, and the stream of
buckets that carries them.

A push is the trainer's ``(name, tensor)`` pairs in schema order, each cast to
the dtype the generator holds (``TensorSpec.dtype``: a bf16 generator gets
bf16, so half the bytes travel and the generator copies instead of casting).
The tensors are laid end to end in one byte stream (each start aligned to
``ALIGN`` bytes, so a view of it can be any dtype), and the stream is cut into
buckets of at most ``bucket_bytes``, one broadcast each. A tensor of at least
``bucket_bytes // OWN_SHARE`` travels in buckets of its own (one, or several
when it is larger than a bucket), so a receiver can take those bytes straight
into its own copy of the tensor, with no receive buffer and no copy
(``unpack``'s ``into``); smaller tensors share buckets, and never straddle two.
Both sides derive the same ``Layout`` from the schema sent once at connection
time and the bucket size announced with each push, so nothing but the bytes
travels.

Memory: the sender packs bucket k+1 while bucket k is being sent (two
buffers), the receiver gets one bucket at a time into its weights or into a
buffer it hands out views of (a tensor larger than a bucket, with no
destination of its own, is joined), so neither side holds a copy of the model
for a push (docs/async.md: pushes every step under PipelineRL, arXiv
2510.13786 §3.1).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

import torch

BUCKET_BYTES = 64 << 20
"""Bytes of one broadcast at most: a push holds two such buffers on the trainer, one on a generator."""
ALIGN = 16
"""Every tensor starts at a multiple of this in the stream (>= the largest element size)."""
AHEAD = 4
"""Buckets a receiver keeps posted ahead of the one it reads (``unpack``)."""
OWN_SHARE = 16
"""A tensor of at least ``bucket_bytes // OWN_SHARE`` bytes gets buckets of its own (4 MiB of 64:
a Qwen2-0.5B push is then 93% such bytes in 82 of its 107 buckets, received in place; the rest,
norms, biases and the attention projections, is copied out of 25 shared buckets). A lower bar
would add broadcasts, each with its fixed costs; a higher one, copies."""


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
    """Where every tensor of a push lies in its byte stream, and where the stream is cut."""

    specs: tuple[TensorSpec, ...]
    offsets: tuple[int, ...]
    """Byte offset of each tensor in the stream (multiples of ``ALIGN``)."""
    total: int
    """The stream's length: the end of its last tensor."""
    bucket_bytes: int
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    """Bucket k is the stream's bytes ``starts[k]:ends[k]`` (the alignment gaps between buckets
    do not travel: a bucket received in place is exactly its tensor's bytes)."""
    own: tuple[int, ...]
    """Per bucket, the tensor it carries alone (a part of it), or -1 for one shared by small tensors."""

    @property
    def n_buckets(self) -> int:
        return len(self.starts)

    @property
    def nbytes(self) -> int:
        """The bytes that travel: the buckets' sizes."""
        return sum(e - s for s, e in zip(self.starts, self.ends))

    def bucket_size(self, k: int) -> int:
        return self.ends[k] - self.starts[k]

    def pieces(self, i: int) -> Iterator[tuple[int, int, int, int]]:
        """Tensor i's parts: ``(bucket k, byte offset in bucket k, start, stop)`` with start/stop
        its own byte range. Cuts fall on element boundaries (``lay_out`` checks the bucket size)."""
        at, end = self.offsets[i], self.offsets[i] + self.specs[i].nbytes
        while at < end:
            k = bisect_right(self.starts, at) - 1
            n = min(end - at, self.ends[k] - at)
            yield k, at - self.starts[k], at - self.offsets[i], at - self.offsets[i] + n
            at += n


def _check_bucket_bytes(bucket_bytes: int) -> None:
    if bucket_bytes <= 0 or bucket_bytes % ALIGN:
        raise ValueError(f"weight push: the bucket size must be a positive multiple of {ALIGN} bytes, got {bucket_bytes}")


class _Cuts:
    """The stream's cuts, made one tensor at a time (``pack_all`` meets its schema as it comes)."""

    def __init__(self, bucket_bytes: int):
        _check_bucket_bytes(bucket_bytes)
        self.bucket_bytes, self.own_min = bucket_bytes, max(ALIGN, bucket_bytes // OWN_SHARE)
        self.offsets: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.own: list[int] = []
        self.end = 0  # the stream's end so far
        self.shared = False  # whether the last bucket takes more small tensors

    def add(self, spec: TensorSpec) -> int:
        """Place the next tensor; returns its offset."""
        at, n, i = -(-self.end // ALIGN) * ALIGN, spec.nbytes, len(self.offsets)
        self.offsets.append(at)
        if n == 0:
            return at
        if n >= self.own_min:  # buckets of its own: a receiver can take it in place
            for cut in range(at, at + n, self.bucket_bytes):
                self.starts.append(cut)
                self.ends.append(min(cut + self.bucket_bytes, at + n))
                self.own.append(i)
            self.shared = False
        elif self.shared and at + n - self.starts[-1] <= self.bucket_bytes:  # a small one never straddles
            self.ends[-1] = at + n
        else:
            self.starts.append(at)
            self.ends.append(at + n)
            self.own.append(-1)
            self.shared = True
        self.end = at + n
        return at

    def layout(self, specs: Sequence[TensorSpec]) -> Layout:
        return Layout(tuple(specs), tuple(self.offsets), self.end, self.bucket_bytes, tuple(self.starts),
                      tuple(self.ends), tuple(self.own))


def lay_out(schema: Sequence[TensorSpec], bucket_bytes: int = BUCKET_BYTES) -> Layout:
    cuts = _Cuts(bucket_bytes)
    for s in schema:
        cuts.add(s)
    return cuts.layout(schema)


def in_order(layout: Layout, state: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]
             ) -> Iterator[tuple[int, torch.Tensor]]:
    """``(index in the schema, tensor)`` for a dict (taken in schema order; its names are checked
    here, before anything is announced) or for ``(name, tensor)`` pairs, which must come in schema
    order (each is checked as it comes: a gathering iterator cannot be read ahead)."""
    if isinstance(state, Mapping):
        missing = [s.name for s in layout.specs if s.name not in state]
        if missing:
            raise KeyError(f"weight push: the state lacks {missing[:3]} of the push schema")
        state = [(s.name, state[s.name]) for s in layout.specs]
    return _checked(layout, iter(state))


def _checked(layout: Layout, pairs: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[int, torch.Tensor]]:
    n = 0
    for i, (name, t) in enumerate(pairs):
        if i >= len(layout.specs) or name != layout.specs[i].name:
            want = repr(layout.specs[i].name) if i < len(layout.specs) else "nothing (the schema has ended)"
            raise ValueError(f"weight push: got {name!r} at position {i}, the schema's is {want}")
        if tuple(t.shape) != layout.specs[i].shape:
            raise ValueError(f"weight push: {name} has shape {tuple(t.shape)}, the schema says {layout.specs[i].shape}")
        yield i, t
        del t  # not held while the next one is gathered
        n += 1
    if n != len(layout.specs):
        raise ValueError(f"weight push: got {n} tensors, the schema has {len(layout.specs)}")


def pack(layout: Layout, named: Iterable[tuple[int, torch.Tensor]], bufs: Sequence[torch.Tensor],
         reuse: Callable[[int], None] = lambda b: None) -> Iterator[tuple[int, torch.Tensor]]:
    """Copy the tensors (``in_order``'s pairs) into buckets, cast to the schema's dtypes; yields
    ``(k, bucket k)`` once it is full. Buckets fill ``bufs`` (uint8) one buffer at a time, back to
    back (16-aligned), moving to the next buffer when the next bucket does not fit; ``reuse(b)``
    is called before buffer b is filled again: the caller must be done with every bucket it held.
    (Many small buckets then share a buffer and are in flight together: a sender does not wait
    for a collective per tensor.)"""
    views: dict[int, torch.Tensor] = {}
    filling, fill = len(bufs) - 1, None  # the buffer being filled, and its first free byte

    def place(k: int) -> torch.Tensor:  # bucket k's view, placed in order of k
        nonlocal filling, fill
        if k not in views:
            n = layout.bucket_size(k)
            if fill is None or fill + n > bufs[filling].numel():
                filling, fill = (filling + 1) % len(bufs), 0
                reuse(filling)
            views[k], fill = bufs[filling][fill : fill + n], -(-(fill + n) // ALIGN) * ALIGN
        return views[k]

    k = 0
    for i, t in named:
        spec = layout.specs[i]
        flat, size = t.detach().reshape(-1), spec.nbytes // max(spec.numel, 1)
        for kb, off, a, b in layout.pieces(i):
            while k < kb:  # every bucket before kb is complete
                yield k, views.pop(k)
                k += 1
            # Cast piece by piece straight into the bucket: no cast copy of a whole tensor (an
            # embedding is the largest). From a GPU tensor into a CPU bucket this is a synchronous
            # device-to-host copy, so the bucket is complete when it is yielded (gloo stages through
            # CPU; vLLM's NCCL plane takes buckets on the GPU: vllm_nccl.py).
            place(kb)[off : off + b - a].view(spec.torch_dtype).copy_(flat[a // size : b // size])
        del t, flat  # a gathered tensor goes before the next is gathered
    while k < layout.n_buckets:
        yield k, place(k)
        views.pop(k)
        k += 1


def packed_bytes(layout: Layout) -> int:
    """The bytes ``pack`` needs to hold every bucket back to back (16-aligned): a sender's buffers
    need be no larger (a small model's push fits one)."""
    return sum(-(-layout.bucket_size(k) // ALIGN) * ALIGN for k in range(layout.n_buckets))


def pack_all(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES
             ) -> tuple[list[TensorSpec], list[torch.Tensor]]:
    """A snapshot of ``(name, tensor)`` pairs as the schema they make and all of their buckets, for
    a sender that must hold the bytes until a later moment (vLLM's relay: an update lands between two
    decode steps, the pairs arrive before). The bytes are those ``lay_out(schema, bucket_bytes)``
    describes, so ``unpack`` reads them back; built as the pairs come, with no schema in advance."""
    cuts = _Cuts(bucket_bytes)
    schema: list[TensorSpec] = []
    bufs: list[torch.Tensor] = []
    for name, t in named:
        spec = TensorSpec(name, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        at = cuts.add(spec)
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8) if spec.numel else torch.empty(0, dtype=torch.uint8)
        done = 0
        while done < raw.numel():  # the cuts so far cover this tensor: it was just placed
            k = bisect_right(cuts.starts, at + done) - 1
            while len(bufs) <= k:
                bufs.append(torch.empty(bucket_bytes, dtype=torch.uint8))
            off = at + done - cuts.starts[k]
            n = min(raw.numel() - done, bucket_bytes - off)
            bufs[k][off : off + n].copy_(raw[done : done + n])
            done += n
        schema.append(spec)
    layout = cuts.layout(schema)
    return schema, [b[: layout.bucket_size(k)] for k, b in enumerate(bufs)]


def unpack(layout: Layout, recv: Callable[[torch.Tensor], Callable[[], None]],
           into: Optional[Callable[[TensorSpec], Optional[torch.Tensor]]] = None) -> Iterator[tuple[str, torch.Tensor]]:
    """The pushed ``(name, tensor)`` pairs in schema order, receiving bucket by bucket.

    ``recv(buf)`` starts receiving the next bucket into ``buf`` and returns the function that
    waits for it: bucket k+1 is already arriving while the consumer copies bucket k's tensors.

    ``into(spec)``: the receiver's own tensor for ``spec`` (its shape and dtype, contiguous, on
    the CPU), or None. A tensor with buckets of its own is then received straight into it, and
    that tensor is what is yielded: nothing to copy (``TorchGenerator.load_weights`` sees its own
    tensor). The weights keep their addresses, so the arithmetic on them is the same bit for bit
    (a layout that moved them changed the last bits of a run: benchmarks/RESULTS.md, 2026-12-02).

    Otherwise a tensor inside one bucket is a view of it, valid as long as it is referenced: a
    bucket's buffer is reused for a later bucket only once no view of it is alive (an engine that
    copies each tensor at once, the torch one, cycles through three buffers; one that keeps views
    for a while, vLLM's chunking, gets fresh ones). A tensor larger than a bucket is joined."""
    pending: list = []  # (buffer or None, bucket view, wait) of the buckets on their way
    spare: list[torch.Tensor] = []  # buffers of consumed buckets
    dests: dict[int, Optional[torch.Tensor]] = {}  # tensor -> its destination's bytes, or None

    def dest(i: int) -> Optional[torch.Tensor]:
        if i not in dests:
            spec, t = layout.specs[i], into(layout.specs[i]) if into is not None else None
            ok = (t is not None and t.device.type == "cpu" and t.dtype == spec.torch_dtype
                  and tuple(t.shape) == spec.shape and t.is_contiguous())
            dests[i] = t.reshape(-1).view(torch.uint8) if ok else None
        return dests[i]

    def in_place(k: int) -> bool:
        return layout.own[k] >= 0 and dest(layout.own[k]) is not None

    def start(k: int) -> None:
        i, size = layout.own[k], layout.bucket_size(k)
        if in_place(k):
            at = layout.starts[k] - layout.offsets[i]
            view, buf = dests[i][at : at + size], None
        else:
            buf = next((spare.pop(j) for j, b in enumerate(spare) if _alone(b)), None)
            if buf is None:
                buf = torch.empty(layout.bucket_bytes, dtype=torch.uint8)
            view = buf[:size]
        pending.append((buf, view, recv(view)))

    posted = 0  # buckets whose receive has started

    def post_ahead() -> None:
        """Keep up to ``AHEAD`` buckets on their way, at most one of them into a buffer: a bucket's
        bytes start only once its receive is posted (gloo), so each wait would otherwise be a round
        trip to the sender; in-place ones cost no memory."""
        nonlocal posted
        while posted < layout.n_buckets and len(pending) < AHEAD:
            if not in_place(posted) and any(buf is not None for buf, _, _ in pending):
                return
            start(posted)
            posted += 1

    post_ahead()
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
        post_ahead()

    for i, spec in enumerate(layout.specs):
        parts = list(layout.pieces(i))
        if parts and layout.own[parts[0][0]] == i and in_place(parts[0][0]):
            while k < parts[-1][0]:  # its buckets arrive in place
                advance()
            yield spec.name, dests.pop(i).view(spec.torch_dtype).view(spec.shape)
            continue
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
    while k + 1 < layout.n_buckets:  # trailing buckets (none in a well-formed layout): keep the collective whole
        advance()


def _alone(buf: torch.Tensor) -> bool:
    """Whether nothing but ``buf`` itself holds its memory (no view of it is alive). Reads the
    storage's reference count through a private torch hook; without it, never reuse."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return False
    alone = torch.empty(1)
    return count(buf.untyped_storage()._cdata) <= count(alone.untyped_storage()._cdata)
