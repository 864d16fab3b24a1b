"""A gloo data plane for vLLM's weight-transfer subsystem (backend ``scalerl_gloo``).

vLLM 0.32 ships only CUDA data planes (``nccl``, ``ipc``, ...; vllm_transfer.py), so
on vLLM-CPU the bytes must travel another way. This backend keeps vLLM's worker-side
lifecycle (``start`` / ``update`` / ``finish``, which reloads layer by layer through
the model's own ``load_weights``) and moves the bytes the way its ``nccl`` backend
does, over a collective instead of the RPC channel: the generator process is rank 0
of a gloo group whose other ranks are vLLM's workers (one per tensor-parallel rank),
and an update is a broadcast of the push's buckets (buckets.py), received bucket by
bucket into the model.

Against ``scalerl_inline`` (the tensors serialised into the ``update_weights`` RPC):
no msgpack of the payload and no copies on the way in besides the bucket itself,
and a worker holds two buckets at a time, not a chunk of 256 MiB as bytes plus its
decoded copy. The generator process keeps one snapshot of the push until it lands
between two decode steps (``VLLMGenerator.load_weights``), as before.

The group is node-local: vLLM's workers are the generator's own child processes,
so its store listens on loopback only, and every connection proves a secret made
for this engine (``trust.handshake``), as the trainer's groups do.
"""
from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from scalerl.generation.transfer.buckets import BUCKET_BYTES, TensorSpec, lay_out, pack_all, unpack
from scalerl.generation.transfer.trust import LOOPBACK, abort_groups, gloo_group, handshake, hosting_store
from scalerl.generation.transfer.wire import broadcast, seconds
from scalerl.generation.transfer.vllm_reload import LayerwiseReload

BACKEND = "scalerl_gloo"
GROUP = "vllm-weights"
TIMEOUT_S = 300.0
"""Bound on one collective of the node-local group: a worker that died fails the push within it."""


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    """Where the generator's store listens, this group's size, and the secret its ranks prove."""

    master_address: str = LOOPBACK
    master_port: int = 0
    world_size: int = 2
    """The generator (rank 0) plus vLLM's workers."""
    secret: str = ""
    """Hex of the group's secret (travels over vLLM's own process-local RPC channel)."""
    timeout_s: float = TIMEOUT_S


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """One update's schema; the bytes follow as a broadcast of ``lay_out(schema, bucket_bytes)``."""

    names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    bucket_bytes: int = BUCKET_BYTES

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.dtypes) == len(self.shapes):
            raise ValueError(f"{len(self.names)} names, {len(self.dtypes)} dtypes, {len(self.shapes)} shapes")

    def schema(self) -> list[TensorSpec]:
        return [TensorSpec(n, tuple(s), d) for n, d, s in zip(self.names, self.dtypes, self.shapes)]


class GlooWeightTransferEngine(LayerwiseReload, WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """Worker side (in vLLM's worker process): joins the group, receives buckets into the model."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        # The worker's rank in its engine (tensor-parallel rank); rank 0 is the generator.
        rank = 1 + self.parallel_config.rank
        self.timeout_s = init_info.timeout_s
        self.store = dist.TCPStore(init_info.master_address, init_info.master_port, None, False,
                                   seconds(init_info.timeout_s))
        self.group = gloo_group(self.store, GROUP, rank, init_info.world_size, init_info.timeout_s,
                                init_info.master_address)
        handshake(self.group, rank, init_info.world_size, bytes.fromhex(init_info.secret), GROUP, init_info.timeout_s)

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        def recv(buf: torch.Tensor):
            (work,) = broadcast(self.group, [buf], self.timeout_s)
            return lambda: work.wait(seconds(self.timeout_s))

        named = unpack(lay_out(update_info.schema(), update_info.bucket_bytes), recv)
        self.model.load_weights((n, t.to(self.device)) for n, t in named)
        for _ in named:  # every rank takes every bucket of the broadcast, read or not
            pass

    def shutdown(self) -> None:
        abort_groups(getattr(self, "group", None))
        self.group = None


class GlooRelay:
    """Generator side: rank 0 of the group, holding a push's buckets until vLLM takes them."""

    def __init__(self, llm, workers: int, timeout_s: float = TIMEOUT_S):
        self.llm, self.size, self.timeout_s = llm, 1 + workers, timeout_s
        secret = secrets.token_bytes(32)
        self.store = hosting_store(LOOPBACK, timeout_s)
        info = GlooInitInfo(master_address=LOOPBACK, master_port=self.store.port, world_size=self.size,
                            secret=secret.hex(), timeout_s=timeout_s)
        # The workers wait inside init_weight_transfer_engine for the group: join it beside them.
        with ThreadPoolExecutor(max_workers=1) as ex:
            joined = ex.submit(llm.init_weight_transfer_engine, {"init_info": asdict(info)})
            self.group = gloo_group(self.store, GROUP, 0, self.size, timeout_s, LOOPBACK)
            handshake(self.group, 0, self.size, secret, GROUP, timeout_s)
            joined.result()

    @staticmethod
    def snapshot(named, bucket_bytes: int = BUCKET_BYTES) -> tuple[dict, list[torch.Tensor]]:
        """The update's ``update_info`` and its buckets (a copy: the caller's tensors may change)."""
        schema, bufs = pack_all(named, bucket_bytes)
        info = GlooUpdateInfo(names=[s.name for s in schema], dtypes=[s.dtype for s in schema],
                              shapes=[list(s.shape) for s in schema], bucket_bytes=bucket_bytes)
        return asdict(info), bufs

    def send(self, update_info: dict, bufs: Sequence[torch.Tensor]) -> None:
        """One ``update_weights`` call, its bytes broadcast beside it (both meet in the same collectives)."""
        ex = ThreadPoolExecutor(max_workers=1)
        try:
            received = ex.submit(self.llm.update_weights, {"update_info": update_info})
            for w in broadcast(self.group, bufs, self.timeout_s):
                w.wait(seconds(self.timeout_s))
            received.result()
        finally:
            ex.shutdown(wait=False)  # after a failed broadcast the worker never answers; do not wait on it

    def close(self) -> None:
        abort_groups(self.group)
        self.group = None
