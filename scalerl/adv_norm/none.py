"""No scaling (Dr. GRPO): only subtract the group mean."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered


@dataclass
class NoNormConfig(AdvNormConfig):
    pass


def centered(rewards, keep, *, cfg: NoNormConfig):
    return group_centered(rewards, keep)
