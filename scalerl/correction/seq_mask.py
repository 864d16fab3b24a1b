"""Sequence-level masking by the largest token-level divergence (Trust Region Masking, PMLR v306;
NeMo-RL's ``seq-mask-tis`` and verl's rollout rejection sampling at the sequence level): a whole
completion is masked when max_t |log w_t| > δ over its sampled tokens, w_t = π_old(y_t) / π_gen(y_t).
One token far outside the trust region means the sequence was not drawn from the policy being
trained. Kept sequences keep weight 1: this option only masks (``tis`` reweighs), and the loss's
ratio is taken against π_old."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.correction.base import CorrectionConfig


@dataclass
class SeqMaskConfig(CorrectionConfig):
    delta: float = 0.6931471805599453
    """δ on |log w_t|; the default ln 2 masks a completion with any token whose ratio leaves [0.5, 2]."""

    def __post_init__(self) -> None:
        check(self.delta > 0, "correction.delta", f"must be > 0 (a bound on |log ratio|), got {self.delta}")


def seq_mask_weight(old_logp, gen_logp, mask, *, cfg: SeqMaskConfig):
    """old_logp, gen_logp, mask: (N, T). Returns ((N, T) 1 on kept sequences, 0 on masked; metrics)."""
    div = ((old_logp - gen_logp).abs() * mask).amax(-1)  # (N,) largest divergence over sampled tokens
    keep = (div <= cfg.delta).to(gen_logp.dtype)  # (N,)
    rows = mask.any(-1).float()  # sequences with a sampled token
    masked = ((1 - keep) * rows).sum() / rows.sum().clamp(min=1)
    return keep[:, None].expand_as(gen_logp), {"correction_masked_frac": masked}
