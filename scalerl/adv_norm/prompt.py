"""Prompt-level normalization (GRPO): divide each group by its own std
(population std)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered


@dataclass
class PromptNormConfig(AdvNormConfig):
    name: str = "prompt"


def prompt_normalized(rewards, keep, cfg: PromptNormConfig):
    centered = group_centered(rewards, keep)
    return centered / (rewards.std(-1, unbiased=False, keepdim=True) + cfg.eps)
