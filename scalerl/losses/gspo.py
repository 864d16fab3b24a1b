"""GSPO (Zheng et al. 2025; arXiv 2510.13786 §3.2): a sequence-level ratio.

s_i = exp(mean_t(log π_θ(y_it) − log π_gen(y_it))) is the geometric mean of
the token ratios, clipped with tiny ε (3e-3 low, 4e-3 high). We use the
"GSPO-token" form: s_it = sg(s_i) · π_θ(y_it) / sg(π_θ(y_it)), whose value is
s_i on every token and whose gradient equals GSPO's.

Aggregation interaction: GSPO's objective averages *sequences*
(``aggregation=sample`` reproduces it exactly). Under ``prompt`` or ``token``
aggregation each sequence is weighted by its length instead; the paper does
not say which it used, so we keep aggregation an independent axis.
"""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.losses.base import CLIPPED, LossConfig, masked_mean


@dataclass
class GspoConfig(LossConfig):
    eps_low: float = 3e-3
    eps_high: float = 4e-3

    def __post_init__(self) -> None:
        check(0 < self.eps_low < 1, "loss.eps_low", f"must be in (0, 1), got {self.eps_low}")
        check(self.eps_high > 0, "loss.eps_high", f"must be > 0, got {self.eps_high}")

    def clamp(self) -> str:
        return f"seq: min(s*A, clip(s, {1 - self.eps_low:g}, {1 + self.eps_high:g})*A), s=geomean(ratio)"


def sequence_log_ratio(logp, behav_logp, mask):
    """mean_t of (logp - behav_logp) over each row's masked tokens -> (N,)."""
    m = mask.to(logp.dtype)
    return ((logp - behav_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)


def gspo_loss(logp, behav_logp, adv, mask, *, cfg: GspoConfig):
    """logp, behav_logp, mask: (N, T); adv: (N,). Returns ((N, T) loss, metrics)."""
    s = torch.exp(sequence_log_ratio(logp.detach(), behav_logp, mask))  # (N,)
    s_tok = s[:, None] * torch.exp(logp - logp.detach())  # value s_i, grad of GSPO
    a = adv[:, None]
    unclipped = s_tok * a
    clipped = s_tok.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * a
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).detach()
    return loss, {"clip_frac": masked_mean(was_clipped.float(), mask), "seq_ratio_mean": s.mean(), CLIPPED: was_clipped}
