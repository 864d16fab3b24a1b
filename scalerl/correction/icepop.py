"""IcePop (Ling team, Ring-1T, 2025): a token whose training-inference ratio
w_t = π_old(y_t) / π_gen(y_t) leaves [α, β] is masked (no gradient) instead of clipped; inside the
band the token keeps the weight w_t, M(w) = w if α <= w <= β else 0 (NeMo-RL's ``icepop``). The loss's
ratio is taken against π_old."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.correction.base import CorrectionConfig, masked_frac, token_ratio


@dataclass
class IcePopConfig(CorrectionConfig):
    lo: float = 0.5
    """α, the band's lower edge (Ring-1T: 0.5)."""
    hi: float = 5.0
    """β, the band's upper edge (Ring-1T: 5)."""

    def __post_init__(self) -> None:
        check(self.lo >= 0, "correction.lo", f"must be >= 0, got {self.lo}")
        check(self.hi > self.lo, "correction.hi", f"must be > correction.lo={self.lo}, got {self.hi}")


def icepop_weight(old_logp, gen_logp, mask, *, cfg: IcePopConfig):
    """old_logp, gen_logp, mask: (N, T). Returns ((N, T) w inside [lo, hi], else 0; metrics)."""
    w = token_ratio(old_logp, gen_logp)  # (N, T)
    inside = (w >= cfg.lo) & (w <= cfg.hi)
    return w * inside, {"correction_masked_frac": masked_frac(~inside, mask)}
