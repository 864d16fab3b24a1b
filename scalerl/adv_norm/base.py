"""The advantage contract, the shared schema and group centring."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class AdvNormConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""


class AdvNormFn(Protocol):
    """(P, G) rewards and (P,) trained mask -> (P, G) advantages (0 on dropped groups)."""

    def __call__(self, rewards: Tensor, trained: Tensor) -> Tensor: ...


def group_centered(rewards: Tensor, trained: Tensor) -> Tensor:
    """r - mean(group), zeroed on dropped groups. (P, G) -> (P, G)."""
    centered = rewards - rewards.mean(-1, keepdim=True)
    return centered * trained[:, None].to(rewards.dtype)
