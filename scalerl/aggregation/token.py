"""Token-level aggregation (DAPO): the mean over every token in the batch."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.aggregation.base import AggregationConfig


@dataclass
class TokenAggConfig(AggregationConfig):
    pass


def token_mean(tok_loss, mask, group_size: int, *, cfg: TokenAggConfig | None = None):
    m = mask.to(tok_loss.dtype)
    units = m.sum()
    return (tok_loss * m).sum() / units.clamp(min=1), units.item()
