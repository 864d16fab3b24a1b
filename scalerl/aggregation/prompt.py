"""Prompt-level aggregation (the ScaleRL choice, arXiv 2510.13786 §3.2): for each prompt, the sum
of its group's token losses divided by the group's total token count; then
the mean over prompts. Long and short answers to one prompt share weight by
tokens, while every prompt counts equally."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.aggregation.base import AggregationConfig


@dataclass
class PromptAggConfig(AggregationConfig):
    pass


def prompt_mean(tok_loss, mask, group_size: int, *, cfg: PromptAggConfig | None = None):
    m = mask.to(tok_loss.dtype)
    per_group_sum = (tok_loss * m).sum(-1).view(-1, group_size).sum(-1)  # (P,)
    per_group_tok = m.sum(-1).view(-1, group_size).sum(-1)  # (P,)
    live = per_group_tok > 0
    units = live.sum()
    loss = (per_group_sum[live] / per_group_tok[live]).sum() / units.clamp(min=1)
    return loss, units.item()
