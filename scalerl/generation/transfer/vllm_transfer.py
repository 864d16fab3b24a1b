"""Pushing the trainer's weights into a running vLLM engine (``generation=vllm``).

vLLM 0.32's weight-transfer subsystem (``vllm/distributed/weight_transfer/``)
splits a push into a control plane (four worker RPCs: ``init_weight_transfer_engine``,
``start_weight_update``, ``update_weights``, ``finish_weight_update``) and a data
plane chosen by ``WeightTransferConfig.backend``. Every backend it ships moves the
bytes over CUDA (``nccl``, ``ipc``, ``sparse_nccl``, ``sharded_rdt``, ``nccl_m2n``), so
none of them runs on a CPU engine. The backends share one worker-side lifecycle,
though: ``start`` puts the model into vLLM's layerwise-reload state, ``update``
feeds ``(name, tensor)`` pairs in checkpoint format to the model's own
``load_weights`` (which fuses q/k/v and gate/up the way a checkpoint load does),
and ``finish`` re-runs the post-load processing. Calling ``load_weights`` outside
that lifecycle fails on a loaded model (its parameters have lost their
``weight_loader``), which is why this module plugs into the subsystem rather than
around it.

``InlineWeightTransferEngine`` (backend ``scalerl_inline``) is that lifecycle with
the simplest data plane: the tensors ride the ``update_weights`` RPC itself, in
bounded chunks, through vLLM's msgpack channel to the worker process. It works on
CPU and GPU alike and needs no rendezvous, so the engine never restarts and the
same code is tested here. Its cost is one host copy of the weights per push; the
CUDA backends avoid it on GPU (see docs/vllm.md).

vLLM creates a backend by name inside its worker process, so the name must be
registered there: ``register`` is a vLLM general plugin (entry point
``vllm.general_plugins`` in pyproject.toml), which vLLM calls in every process it
starts. Importing this module registers nothing.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

from scalerl.generation.transfer.vllm_gloo import BACKEND as GLOO
from scalerl.generation.transfer.vllm_gloo import GlooWeightTransferEngine
from scalerl.generation.transfer.vllm_reload import LayerwiseReload

BACKEND = "scalerl_inline"
CHUNK_BYTES = 256 << 20
"""Largest payload of one ``update_weights`` RPC: bounds the serialised message."""


@dataclass
class InlineInitInfo(WeightTransferInitInfo):
    """No rendezvous: the data travels with each update."""


@dataclass
class InlineUpdateInfo(WeightTransferUpdateInfo):
    """One chunk: the raw bytes of its tensors, back to back, and how to cut them apart.
    (vLLM's RPC channel carries plain msgpack types; a tensor nested in a dict would
    arrive as its encoding, not as a tensor.)"""

    names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    data: bytes = b""

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.dtypes) == len(self.shapes):
            raise ValueError(f"{len(self.names)} names, {len(self.dtypes)} dtypes, {len(self.shapes)} shapes")

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        dtypes = [getattr(torch, d) for d in self.dtypes]
        sizes = [math.prod(shape) * torch.empty((), dtype=dt).element_size() for dt, shape in zip(dtypes, self.shapes)]
        if sum(sizes) != len(self.data):
            raise ValueError(f"update carries {len(self.data)} bytes, its tensors need {sum(sizes)}")
        buf = torch.frombuffer(bytearray(self.data), dtype=torch.uint8) if self.data else torch.empty(0, dtype=torch.uint8)
        out, at = [], 0
        for name, dt, shape, n in zip(self.names, dtypes, self.shapes, sizes):
            out.append((name, buf[at : at + n].clone().view(dt).reshape(shape)))  # clone: aligned for dt
            at += n
        return out


class InlineWeightTransferEngine(LayerwiseReload, WeightTransferEngine[InlineInitInfo, InlineUpdateInfo]):
    """Worker side: vLLM's checkpoint-format reload lifecycle, tensors received in-band."""

    init_info_cls = InlineInitInfo
    update_info_cls = InlineUpdateInfo

    def init_transfer_engine(self, init_info: InlineInitInfo) -> None:
        pass

    def receive_weights(self, update_info: InlineUpdateInfo) -> None:
        self.model.load_weights([(n, t.to(self.device)) for n, t in update_info.tensors()])

    def shutdown(self) -> None:
        pass


def register() -> None:
    """vLLM general plugin: make ``scalerl_inline`` and ``scalerl_gloo`` (vllm_gloo.py) available in
    this process (idempotent)."""
    if BACKEND not in WeightTransferEngineFactory._registry:
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_rotary_cache_filter)
    for name, engine in ((BACKEND, InlineWeightTransferEngine), (GLOO, GlooWeightTransferEngine)):
        if name not in WeightTransferEngineFactory._registry:
            WeightTransferEngineFactory.register_engine(name, engine)


def _rotary_cache_filter(record: logging.LogRecord) -> bool:
    """Drop the reload's "RotaryEmbedding: Failed to load weights": its cos/sin cache is derived,
    never in a checkpoint, and the reload puts it back; the warning would repeat on every push."""
    return not (record.args and record.args[0] == "RotaryEmbedding" and "Failed to load" in str(record.msg))


def chunks(named_tensors: Iterable[tuple[str, torch.Tensor]], max_bytes: int = CHUNK_BYTES
           ) -> Iterator[dict[str, list]]:
    """``update_info`` payloads (``InlineUpdateInfo`` fields) of at most ``max_bytes`` each;
    one oversized tensor is its own chunk. Tensors are copied to host memory."""
    batch: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named_tensors:
        t = t.detach().to("cpu").contiguous()
        nbytes = t.numel() * t.element_size()
        if batch and size + nbytes > max_bytes:
            yield _pack(batch)
            batch, size = [], 0
        batch.append((name, t))
        size += nbytes
    if batch:
        yield _pack(batch)


def _pack(batch: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    raw = torch.cat([t.reshape(-1).view(torch.uint8) for _, t in batch]) if batch else torch.empty(0, dtype=torch.uint8)
    return {"names": [n for n, _ in batch], "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in batch],
            "shapes": [list(t.shape) for _, t in batch], "data": raw.numpy().tobytes()}
