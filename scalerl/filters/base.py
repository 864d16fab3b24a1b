"""The filter contract and the shared schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class FilterConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""

    @property
    def retire_at(self) -> Optional[float]:
        """No-Positive-Resampling: retire prompts whose pass rate is >= this (None: never)."""
        return None

    @property
    def refill_rounds(self) -> int:
        """DAPO dynamic sampling: extra generation rounds per step to refill dropped groups."""
        return 0


class FilterFn(Protocol):
    """(P, G) rewards -> (P,) bool: which prompt groups enter the loss."""

    def __call__(self, rewards: Tensor) -> Tensor: ...
