"""Truncated importance sampling, TIS (Yao et al., 2025, "Your Efficient RL Framework Secretly
Brings You Off-Policy RL Training"): each token's policy-gradient term is weighted by
min(w_t, C), w_t = π_old(y_t) / π_gen(y_t), with π_old the trainer's own log-prob at the
behaviour weights, and the loss's ratio taken against π_old. The weight is a constant (no
gradient). The same as TRL's ``vllm_importance_sampling_mode`` (token truncation), verl's
``rollout_is`` (token level), NeMo-RL's ``tis`` and slime's ``--use-tis --tis-clip``."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.correction.base import CorrectionConfig, masked_frac, token_ratio


@dataclass
class TisConfig(CorrectionConfig):
    C: float = 2.0
    """Truncation of the weight, min(w, C) (Yao et al. 2025 and verl's ``rollout_is_threshold``: 2)."""

    def __post_init__(self) -> None:
        check(self.C > 0, "correction.C", f"must be > 0 (the weight is truncated at C), got {self.C}")


def tis_weight(old_logp, gen_logp, mask, *, cfg: TisConfig):
    """old_logp, gen_logp, mask: (N, T). Returns ((N, T) min(w, C), metrics)."""
    w = token_ratio(old_logp, gen_logp)  # (N, T)
    return w.clamp(max=cfg.C), {"correction_clip_frac": masked_frac(w > cfg.C, mask)}
