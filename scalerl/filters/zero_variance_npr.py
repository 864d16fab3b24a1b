"""Zero-variance filtering plus No-Positive-Resampling (ScaleRL §3, from
POLARIS): a prompt whose pass rate reaches ``npr_threshold`` (0.9, inclusive)
is retired and not sampled in later epochs. Its pass-rate history lives in
the prompt sampler and is saved in checkpoints."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from scalerl.config.errors import check
from scalerl.filters.base import FilterConfig


@dataclass
class ZeroVarianceNPRConfig(FilterConfig):
    name: str = "zero_variance_npr"
    npr_threshold: Optional[float] = 0.9

    def __post_init__(self) -> None:
        t = self.npr_threshold
        check(t is not None and 0 < t <= 1, "filter.npr_threshold", f"must be in (0, 1], got {t}")


def retire_mask(pass_rates: torch.Tensor, threshold: float) -> torch.Tensor:
    """(P,) group pass rates -> (P,) True for prompts to retire (>= threshold)."""
    return pass_rates >= threshold
