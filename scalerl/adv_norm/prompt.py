"""Prompt-level normalization (GRPO): divide each group by its own std
(population std)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered
from scalerl.core.errors import check


@dataclass
class PromptAdvNormConfig(AdvNormConfig):
    eps: float = 1e-6
    """Added to each group's std so a unanimous group does not divide by zero."""

    def __post_init__(self) -> None:
        check(self.eps > 0, "adv_norm.eps", f"must be > 0, got {self.eps}")


def prompt_normalized(rewards, trained, *, cfg: PromptAdvNormConfig):
    centered = group_centered(rewards, trained)
    return centered / (rewards.std(-1, unbiased=False, keepdim=True) + cfg.eps)
