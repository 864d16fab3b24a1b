from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING

from scalerl.config.errors import check


@dataclass
class AdvNormConfig:
    name: str = MISSING
    eps: float = 1e-6
    """Added to the std so an all-equal batch does not divide by zero."""

    def __post_init__(self) -> None:
        check(self.eps > 0, "adv_norm.eps", f"must be > 0, got {self.eps}")


def group_centered(rewards: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """r - mean(group), zeroed on dropped groups. (P, G) -> (P, G)."""
    centered = rewards - rewards.mean(-1, keepdim=True)
    return centered * keep[:, None].to(rewards.dtype)
