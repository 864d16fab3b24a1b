"""The precision contract, the shared schema and the LM head function."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from omegaconf import MISSING

from scalerl.core.lazy import torch

if TYPE_CHECKING:
    from torch import Tensor, dtype

HeadFn = Callable[["Tensor", "Tensor"], "Tensor"]
"""(hidden (..., H), head weight (V, H)) -> logits (..., V)."""


@dataclass
class PrecisionConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""


@dataclass(frozen=True)
class Heads:
    gen: HeadFn
    train: HeadFn
    body_dtype: Optional[dtype]
    """None: the run's compute dtype (bf16 on GPU, fp32 on CPU)."""
    gen_dtype: Optional[dtype]
    """dtype of the generator's logits, for engines that take it as a setting (vLLM's
    ``head_dtype``) rather than as the ``gen`` function; None: the body's."""


class HeadsFn(Protocol):
    """The run's compute dtype -> the head functions of both sides and the body dtype."""

    def __call__(self, compute_dtype: dtype) -> Heads: ...


def linear_head(dtype: Optional[dtype]) -> HeadFn:
    """LM head computed in ``dtype`` (None: the model's own dtype)."""

    def head(hidden: Tensor, weight: Tensor) -> Tensor:
        if dtype is None:
            return torch.nn.functional.linear(hidden, weight)
        return torch.nn.functional.linear(hidden.to(dtype), weight.to(dtype))

    return head
