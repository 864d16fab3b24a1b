"""No correction: ScaleRL's recipe (arXiv 2510.13786 §3.2). CISPO's ratio is taken straight
against the generator's log-probs, and its truncation min(ρ, ε_max) is itself a truncated
importance weight; no extra forward runs."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.correction.base import CorrectionConfig


@dataclass
class NoCorrectionConfig(CorrectionConfig):
    def needs_old_logp(self) -> bool:
        return False


def no_correction(old_logp, gen_logp, mask, *, cfg: NoCorrectionConfig):
    """Weight 1 on every token (never called by the update: it needs no π_old)."""
    return torch.ones_like(gen_logp), {}
