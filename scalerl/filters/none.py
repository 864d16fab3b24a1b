"""No filtering: every group enters the loss (zero-variance groups then
contribute zero advantage but still count in the aggregation's denominator)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.filters.base import FilterConfig


@dataclass
class NoFilterConfig(FilterConfig):
    name: str = "none"


def keep_all(rewards: torch.Tensor) -> torch.Tensor:
    return torch.ones(rewards.shape[0], dtype=torch.bool, device=rewards.device)
