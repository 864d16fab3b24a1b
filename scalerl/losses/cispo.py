"""CISPO (MiniMax-M1; the ScaleRL choice, arXiv 2510.13786 §3.2).

J = Σ sg(min(ρ_t, ε_max)) · Â · log π_θ(y_t), with ρ = π_train / π_gen.
The clipped importance weight is stop-gradient, so *every* token keeps a
REINFORCE-style gradient (no token is dropped by clipping, unlike PPO);
ε_max ∈ {4, 5, 8} made no difference in the paper. No lower clip by default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.losses.base import CLIPPED, LossConfig, masked_mean


@dataclass
class CispoConfig(LossConfig):
    eps_max: float = 4.0
    """Absolute cap on the importance ratio ρ (not 1+ε: TRL-style; verl clamps to 1±ε instead)."""
    eps_min: Optional[float] = None
    """Optional absolute floor on ρ; None = no lower clip (paper)."""

    def __post_init__(self) -> None:
        check(self.eps_max > 0, "loss.eps_max", f"must be > 0, got {self.eps_max}")
        if self.eps_min is not None:
            check(0 <= self.eps_min < self.eps_max, "loss.eps_min", f"must be in [0, loss.eps_max), got {self.eps_min}")

    def clamp(self) -> str:
        lo = "None" if self.eps_min is None else f"{self.eps_min:g}"
        return f"sg(clip(ratio, {lo}, {self.eps_max:g}))*A*logp"


def cispo_loss(logp, behav_logp, adv, mask, *, cfg: CispoConfig):
    """logp, behav_logp, mask: (N, T); adv: (N,). Returns ((N, T) loss, metrics)."""
    ratio = torch.exp(logp.detach() - behav_logp)  # (N, T)
    weight = ratio.clamp(min=cfg.eps_min, max=cfg.eps_max)  # sg(...) via detach above
    loss = -weight * adv[:, None] * logp
    clipped = ratio > cfg.eps_max
    if cfg.eps_min is not None:
        clipped |= ratio < cfg.eps_min
    return loss, {"clip_frac": masked_mean(clipped.float(), mask), CLIPPED: clipped}
