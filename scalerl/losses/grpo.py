"""GRPO's surrogate (DeepSeekMath): symmetric token-level PPO clip, ε=0.2.
No KL term, as everywhere in arXiv 2510.13786 (§2)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.losses.base import LossConfig
from scalerl.losses.base import ppo_clip_token_loss


@dataclass
class GrpoConfig(LossConfig):
    eps: float = 0.2

    def __post_init__(self) -> None:
        check(0 < self.eps < 1, "loss.eps", f"must be in (0, 1), got {self.eps}")

    def clamp(self) -> str:
        return f"min(ratio*A, clip(ratio, {1 - self.eps:g}, {1 + self.eps:g})*A)"


def grpo_loss(logp, behav_logp, adv, mask, *, cfg: GrpoConfig):
    return ppo_clip_token_loss(logp, behav_logp, adv, mask, cfg.eps, cfg.eps)
