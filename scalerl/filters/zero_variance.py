"""Zero-variance filtering (ScaleRL §3): groups whose G rewards are all equal
carry no learning signal and are dropped from the loss, not refilled. The
effective batch size is logged."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.filters.base import FilterConfig


@dataclass
class ZeroVarianceConfig(FilterConfig):
    name: str = "zero_variance"


def nonzero_variance(rewards: torch.Tensor) -> torch.Tensor:
    """(P, G) -> (P,) True where the group's rewards are not all equal."""
    return (rewards != rewards[:, :1]).any(-1)
