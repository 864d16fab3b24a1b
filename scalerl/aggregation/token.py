"""Token-level aggregation (DAPO): the mean over every token in the batch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.aggregation.base import AggregationConfig


@dataclass
class TokenAggConfig(AggregationConfig):
    name: str = "token"


def token_mean(tok_loss: torch.Tensor, mask: torch.Tensor, group_size: int):
    m = mask.to(tok_loss.dtype)
    units = m.sum()
    return (tok_loss * m).sum() / units.clamp(min=1), units.item()
