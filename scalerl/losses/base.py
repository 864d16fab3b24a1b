"""Shared loss schema and helpers."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING


@dataclass
class LossConfig:
    name: str = MISSING

    def clamp(self) -> str:
        """The exact ratio clamp, written to run metadata and the leaderboard
        (PAPER.md §5: "CISPO" means different clamps in different frameworks)."""
        raise NotImplementedError


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)
