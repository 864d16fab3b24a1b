"""Zero-variance filtering plus No-Positive-Resampling (arXiv 2510.13786 §3.2,
from POLARIS): a prompt whose pass rate reaches ``npr_threshold`` (0.9,
inclusive) is retired and not sampled in later epochs. Its pass-rate history
lives in the prompt sampler and is saved in checkpoints."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.filters.base import FilterConfig


@dataclass
class ZeroVarianceNPRConfig(FilterConfig):
    npr_threshold: float = 0.9
    """Retire a prompt once its pass rate is >= this (inclusive)."""

    def __post_init__(self) -> None:
        t = self.npr_threshold
        check(0 < t <= 1, "filter.npr_threshold", f"must be in (0, 1], got {t}")

    @property
    def retire_at(self) -> float:
        return self.npr_threshold
