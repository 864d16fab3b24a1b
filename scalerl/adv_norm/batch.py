"""Batch-level normalization (the ScaleRL choice, arXiv 2510.13786 §3.2):
Â = r − mean(group), divided by the std of all kept Â in the batch
(population std). Unlike per-prompt std it does not blow up near-unanimous
groups."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered
from scalerl.core.errors import check


@dataclass
class BatchAdvNormConfig(AdvNormConfig):
    eps: float = 1e-6
    """Added to the std so an all-equal batch does not divide by zero."""

    def __post_init__(self) -> None:
        check(self.eps > 0, "adv_norm.eps", f"must be > 0, got {self.eps}")


def batch_normalized(rewards, trained, *, cfg: BatchAdvNormConfig):
    centered = group_centered(rewards, trained)  # (P, G)
    kept = centered[trained]
    if kept.numel() == 0:
        return centered
    return centered / (kept.std(unbiased=False) + cfg.eps)
