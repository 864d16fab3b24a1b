"""The token-level PPO clipped surrogate shared by DAPO and GRPO."""
from __future__ import annotations

from scalerl.core.lazy import torch
from scalerl.losses.base import CLIPPED, masked_mean


def ppo_clip_token_loss(logp, behav_logp, adv, mask, eps_low: float, eps_high: float):
    """-min(ρ·Â, clip(ρ, 1-ε_low, 1+ε_high)·Â) per token.

    logp, behav_logp, mask: (N, T); adv: (N,). Returns ((N, T) loss, metrics).
    Tokens whose clipped branch is active get zero gradient.
    """
    a = adv[:, None]
    ratio = torch.exp(logp - behav_logp)  # (N, T), carries gradient
    unclipped = ratio * a
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * a
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).detach()
    return loss, {"clip_frac": masked_mean(was_clipped.float(), mask), CLIPPED: was_clipped}
