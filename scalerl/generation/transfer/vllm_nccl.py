"""The trainer's side of vLLM's own ``nccl`` weight-transfer data plane
(``generation.weight_transfer=nccl``, GPUs only): trainer rank 0 broadcasts each push from its
GPU straight to the vLLM workers of every generator process, over one NCCL group of rank 0
plus those workers (PipelineRL's layout; docs/vllm.md). The generator process only relays
vLLM's control calls (``VLLMGenerator.join_weight_group`` / ``receive_broadcast``); no byte of
the weights passes through it or through host memory.

The wire format is vLLM's ``packed`` one, which its worker (``NCCLWeightTransferEngine``)
decodes: the tensors in schema order, in the generator's dtype, packed back to back into
chunks, a chunk closed as soon as it holds more than ``chunk_bytes``
(``packed_nccl_broadcast_consumer`` cuts the same chunks from the same names, dtypes and
shapes, sent once as ``update_info``). The group is joined through an NCCL unique id that
rank 0 mints and sends with the init call (vLLM's rendezvous for a trainer that is not a vLLM
process): this module uses torch's own NCCL bindings (``torch.cuda.nccl``) and imports no vLLM,
so the trainer never does.

Handshakes, so that no NCCL call waits on a generator that is not there (NCCL has no deadline
of its own): the trainer enters ``ncclCommInitRank`` only after every generator has said it is
joining, and a push's gathers and broadcasts only after every generator has said it is inside
vLLM's ``update_weights`` (prime-rl's lesson: gathers queued before the peers were ready hung
until NCCL's watchdog). A push's completion is then polled with the hub's deadline and
liveness checks, never waited on blindly.

Written against vLLM 0.32's ``nccl_engine.py`` / ``packed_tensor.py`` and checked on CPU against
vLLM's own packing and init/update dataclasses (tests/test_vllm_nccl.py); not run on GPUs here
(docs/limitations.md).
"""
from __future__ import annotations

import base64
from typing import Callable, Iterable, Iterator, Sequence

import torch
import torch.cuda.nccl as nccl

from scalerl.generation.transfer.buckets import BUCKET_BYTES, TensorSpec

CHUNK_BYTES = BUCKET_BYTES
"""vLLM's ``packed_buffer_size_bytes``: a chunk closes once it holds more than this, so one chunk
is at most this plus its last tensor (an 8B model's 1 GiB embedding: about 1.06 GiB)."""
CHUNK_BUFFERS = 2
"""vLLM's ``packed_num_buffers`` (its worker receives on this many CUDA streams in turn)."""


def chunks(schema: Sequence[TensorSpec], chunk_bytes: int = CHUNK_BYTES) -> list[range]:
    """The schema's tensors, by index, in vLLM's packed chunks: each chunk takes tensors until its
    bytes exceed ``chunk_bytes``; the rest is the last chunk (vLLM 0.32,
    ``packed_nccl_broadcast_consumer``: the worker cuts these from ``update_info`` alone)."""
    out, first, size = [], 0, 0
    for i, spec in enumerate(schema):
        size += spec.nbytes
        if size > chunk_bytes:
            out.append(range(first, i + 1))
            first, size = i + 1, 0
    if first < len(schema):
        out.append(range(first, len(schema)))
    return out


def pack_chunks(schema: Sequence[TensorSpec], chunk_rows: list[range], named: Iterable[tuple[int, torch.Tensor]],
                empty: Callable[[int], torch.Tensor]) -> Iterator[torch.Tensor]:
    """The chunks' bytes in order: each tensor (``buckets.in_order``'s pairs) cast to its spec's
    dtype straight into ``empty(nbytes)`` (a uint8 buffer on the sending GPU), back to back with
    no alignment, as vLLM's ``pack_tensors`` concatenates them. A chunk is yielded once complete;
    the caller broadcasts it before taking the next (in stream order on one CUDA stream, so the
    caching allocator may hand the same memory to the next chunk)."""
    pairs = iter(named)
    for rows in chunk_rows:
        buf = empty(sum(schema[i].nbytes for i in rows))
        at = 0
        for i in rows:
            j, t = next(pairs)
            assert j == i, (j, i)
            spec, flat = schema[i], t.detach().reshape(-1)
            if spec.numel == 0 or at % (spec.nbytes // spec.numel) == 0:  # cast straight into the chunk
                buf[at : at + spec.nbytes].view(spec.torch_dtype).copy_(flat)
            else:  # a view of that dtype cannot start here: cast, then copy the bytes
                buf[at : at + spec.nbytes].copy_(flat.to(spec.torch_dtype).view(torch.uint8))
            at += spec.nbytes
            del t, flat
        yield buf
        del buf


def init_info(uid: bytes, rank_offset: int, world_size: int, chunk_bytes: int = CHUNK_BYTES) -> dict:
    """``init_info`` of vLLM's ``NCCLWeightTransferInitInfo`` for one engine: its workers' ranks start
    at ``rank_offset`` (rank 0 is the trainer)."""
    return {"nccl_unique_id_b64": base64.b64encode(uid).decode(), "rank_offset": rank_offset,
            "world_size": world_size, "packed": True, "packed_buffer_size_bytes": chunk_bytes,
            "packed_num_buffers": CHUNK_BUFFERS}


def update_info(schema: Sequence[TensorSpec]) -> dict:
    """``update_info`` of vLLM's ``NCCLWeightTransferUpdateInfo``: what the chunks hold."""
    return {"names": [s.name for s in schema], "dtype_names": [s.dtype for s in schema],
            "shapes": [list(s.shape) for s in schema]}


def joining_key(j: int) -> str:
    return f"nccl-joining/{j}"


def entered_key(j: int, version: int) -> str:
    return f"nccl-entered/{j}/{version}"


class NcclPlane:
    """Rank 0's end: the NCCL group with the generators' vLLM workers, and the push through it."""

    def __init__(self, schema: Sequence[TensorSpec], device: torch.device, n: int, shards: int = 1,
                 chunk_bytes: int = CHUNK_BYTES):
        """``n`` generator processes of ``shards`` vLLM workers each (tensor-parallel ranks)."""
        self.schema, self.device, self.n, self.shards = tuple(schema), torch.device(device), n, shards
        self.chunk_bytes, self.chunk_rows = chunk_bytes, chunks(schema, chunk_bytes)
        self.world = 1 + n * shards
        self.comm = None

    def connect(self, hub) -> None:
        """Mint the group's id, send every generator its init call, wait until each says it is
        joining, then join as rank 0 (``ncclCommInitRank`` returns once every rank is in)."""
        uid = nccl.unique_id()
        hub.send("weights_group", {"init_info": [init_info(uid, 1 + j * self.shards, self.world, self.chunk_bytes)
                                                 for j in range(self.n)]})
        keys = [joining_key(j) for j in range(self.n)]
        hub.wait(lambda: hub.has(keys), "start-up: waiting for the generators to join the NCCL weights group")
        for k in keys:
            hub.store.delete_key(k)
        with torch.cuda.device(self.device):
            self.comm = nccl.init_rank(self.world, uid, 0)
            # vLLM's communicator opens with a one-element float32 all-reduce; every peer must match it.
            nccl.all_reduce([torch.zeros(1, device=self.device)], comms=[self.comm])

    def push(self, hub, version: int, named: Iterable[tuple[int, torch.Tensor]]) -> Callable[[], bool]:
        """Announce ``version``, wait until every generator is inside vLLM's ``update_weights``, then
        cast and broadcast chunk by chunk (``named``: ``buckets.in_order``'s pairs; a sharded
        trainer's gathers run only now). Returns the poll that says when the last chunk has left
        this GPU (the trainer's weights may change after it)."""
        hub.send("push", {"version": version, "transfer": "nccl"})
        keys = [entered_key(j, version) for j in range(self.n)]
        hub.wait(lambda: hub.has(keys), f"pushing weights (version {version}): waiting for the generators to "
                                        "enter vLLM's update")
        for k in keys:
            hub.store.delete_key(k)
        # All on the device's current stream: each chunk's cast, its broadcast, then the next chunk,
        # which may reuse the same memory (the caching allocator orders reuse by stream); the
        # optimizer step after the push changes a weight only after its cast, by the same order.
        for buf in pack_chunks(self.schema, self.chunk_rows, named,
                               lambda n: torch.empty(n, dtype=torch.uint8, device=self.device)):
            nccl.broadcast([buf], root=0, comms=[self.comm])
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        return done.query
