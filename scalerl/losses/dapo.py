"""DAPO's decoupled clip (Yu et al. 2025; arXiv 2510.13786 §3.2).

Token-level PPO clip with asymmetric ε_low=0.2, ε_high=0.28 ("clip-higher");
the paper found ε_high moves the asymptote A.
"""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.losses.base import LossConfig
from scalerl.losses.base import ppo_clip_token_loss


@dataclass
class DapoConfig(LossConfig):
    eps_low: float = 0.2
    eps_high: float = 0.28

    def __post_init__(self) -> None:
        check(0 < self.eps_low < 1, "loss.eps_low", f"must be in (0, 1), got {self.eps_low}")
        check(self.eps_high > 0, "loss.eps_high", f"must be > 0, got {self.eps_high}")

    def clamp(self) -> str:
        return f"min(ratio*A, clip(ratio, {1 - self.eps_low:g}, {1 + self.eps_high:g})*A)"


def dapo_loss(logp, behav_logp, adv, mask, *, cfg: DapoConfig):
    return ppo_clip_token_loss(logp, behav_logp, adv, mask, cfg.eps_low, cfg.eps_high)
