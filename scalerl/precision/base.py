"""The precision contract, the shared schema and the LM head function."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from omegaconf import MISSING

from scalerl.core.errors import check
from scalerl.core.lazy import torch

if TYPE_CHECKING:
    from torch import Tensor, dtype

BODY_DTYPES = ("auto", "engine", "float32", "bfloat16", "float16")
"""``generator_body`` settings; ``engine``: see ``round_dtype``."""
ENGINE_DTYPE = "bfloat16"
"""The dtype a serving engine (vLLM, SGLang) holds the weights in."""
HeadFn = Callable[["Tensor", "Tensor"], "Tensor"]
"""(hidden (..., H), head weight (V, H)) -> logits (..., V)."""


@dataclass
class PrecisionConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""

    def generator_body_setting(self) -> str:
        """The option's ``generator_body`` (the generator's own body dtype), or auto where it has none."""
        return "auto"


@dataclass
class GeneratorBodyConfig(PrecisionConfig):
    """The schema of the options whose generator keeps its own copy of the weights in a dtype of its own."""

    generator_body: str = "auto"
    """The generator's own copy of the weights: engine (bf16 weights, as a serving engine holds them;
    computed in the trainer's body dtype, ``round_dtype``), auto (the trainer's weights), or a dtype
    the generator's body computes in: float32, bfloat16 or float16. The YAMLs' default is engine."""

    def __post_init__(self) -> None:
        check(self.generator_body in BODY_DTYPES, "precision.generator_body",
              f"must be one of {BODY_DTYPES}, got {self.generator_body!r}")

    def generator_body_setting(self) -> str:
        return self.generator_body


@dataclass(frozen=True)
class Heads:
    """The dtype the LM head (logits) is computed in on each side, and the body's."""

    gen_dtype: dtype
    """Generator-side head dtype (behaviour log-probs)."""
    train_dtype: dtype
    """Trainer-side head dtype; under FSDP2 the head's weight is also gathered in it."""
    body_dtype: Optional[dtype]
    """None: the run's compute dtype (bf16 on GPU, fp32 on CPU)."""
    gen_body_dtype: Optional[dtype] = None
    """The dtype of the generator's own copy of the weights (None: the trainer's body dtype).
    A different one gives the generator its own copy even in the trainer's process, so the
    generator-trainer mismatch is a real one (arXiv 2510.13786 §3.2)."""
    gen_round_dtype: Optional[dtype] = None
    """The generator's weights are rounded to this dtype (and computed in their own); None: not
    rounded. ``generator_body=engine`` on an fp32 trainer: bf16 weights computed in fp32 (docs/mismatch.md)."""

    @property
    def gen(self) -> HeadFn:
        return linear_head(self.gen_dtype)

    @property
    def train(self) -> HeadFn:
        return linear_head(self.train_dtype)


class HeadsFn(Protocol):
    """The run's compute dtype -> the head functions of both sides and the body dtype."""

    def __call__(self, compute_dtype: dtype) -> Heads: ...


def body_dtype(name: str) -> Optional[dtype]:
    """A ``generator_body`` setting as a torch dtype; ``auto`` and ``engine``: None (the trainer's)."""
    return None if name in ("auto", "engine") else getattr(torch, name)


def round_dtype(name: str) -> Optional[dtype]:
    """The dtype a ``generator_body`` setting rounds the generator's weights to. ``engine``: a
    serving engine's bf16 weights, emulated on the trainer's body dtype. On this project's CPUs a
    bf16 matmul costs 4-12x an fp32 one (no native bf16, benchmarks/RESULTS.md), so the generator
    keeps computing in fp32 on bf16-rounded weights: that reproduces the weight rounding of a real
    engine, not its bf16 activations, accumulation or kernels (docs/mismatch.md). Where the trainer
    itself is bf16 (a GPU), rounding to bf16 changes nothing."""
    return getattr(torch, ENGINE_DTYPE) if name == "engine" else None


def linear_head(dtype: Optional[dtype]) -> HeadFn:
    """LM head computed in ``dtype`` (None: the model's own dtype)."""

    def head(hidden: Tensor, weight: Tensor) -> Tensor:
        if dtype is None:
            return torch.nn.functional.linear(hidden, weight)
        return torch.nn.functional.linear(hidden.to(dtype), weight.to(dtype))

    # What the trainer's chunked head needs to redo this arithmetic in its own autograd function
    # (models/head_stats.py); a head function without it is checkpointed per chunk instead.
    head.linear_dtype = dtype
    return head
