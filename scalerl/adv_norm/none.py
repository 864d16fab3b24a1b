"""No scaling (Dr. GRPO): only subtract the group mean."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.adv_norm.base import AdvNormConfig, group_centered


@dataclass
class NoAdvNormConfig(AdvNormConfig):
    pass


def centered(rewards, trained, *, cfg: NoAdvNormConfig):
    return group_centered(rewards, trained)
