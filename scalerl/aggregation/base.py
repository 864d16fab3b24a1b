"""The aggregation contract and the shared schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class AggregationConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""


class AggregateFn(Protocol):
    """Reduce (N, T) per-token losses over a mask to (scalar loss, units averaged over)."""

    def __call__(self, tok_loss: Tensor, mask: Tensor, group_size: int) -> tuple[Tensor, float]: ...
