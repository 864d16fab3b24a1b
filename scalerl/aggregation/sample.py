"""Sample-level aggregation (GRPO): each sample's token mean, then the mean
over samples."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.aggregation.base import AggregationConfig


@dataclass
class SampleAggConfig(AggregationConfig):
    name: str = "sample"


def sample_mean(tok_loss: torch.Tensor, mask: torch.Tensor, group_size: int):
    m = mask.to(tok_loss.dtype)
    n_tok = m.sum(-1)  # (N,)
    live = n_tok > 0
    units = live.sum()
    loss = ((tok_loss * m).sum(-1)[live] / n_tok[live]).sum() / units.clamp(min=1)
    return loss, units.item()
