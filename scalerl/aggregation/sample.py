"""Sample-level aggregation (GRPO): each sample's token mean, then the mean
over samples."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.aggregation.base import AggregationConfig


@dataclass
class SampleAggConfig(AggregationConfig):
    pass


def sample_mean(tok_loss, mask, group_size: int, *, cfg: SampleAggConfig | None = None):
    m = mask.to(tok_loss.dtype)
    n_tok = m.sum(-1)  # (N,)
    live = n_tok > 0
    units = live.sum()
    loss = ((tok_loss * m).sum(-1)[live] / n_tok[live]).sum() / units.clamp(min=1)
    return loss, units.item()
