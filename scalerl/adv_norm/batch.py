"""Batch-level normalization (the ScaleRL choice, §3): Â = r − mean(group),
divided by the std of all kept Â in the batch (population std). Unlike
per-prompt std it does not blow up near-unanimous groups."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered


@dataclass
class BatchNormConfig(AdvNormConfig):
    name: str = "batch"


def batch_normalized(rewards, keep, cfg: BatchNormConfig):
    centered = group_centered(rewards, keep)  # (P, G)
    kept = centered[keep]
    if kept.numel() == 0:
        return centered
    return centered / (kept.std(unbiased=False) + cfg.eps)
