"""Zero-variance filtering (arXiv 2510.13786 §3.2): groups whose G rewards are
all equal carry no learning signal and are dropped from the loss, not
refilled. The effective batch size is logged."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.filters.base import FilterConfig


@dataclass
class ZeroVarianceConfig(FilterConfig):
    pass


def nonzero_variance(rewards, *, cfg: FilterConfig | None = None):
    """(P, G) -> (P,) True where the group's rewards are not all equal."""
    return (rewards != rewards[:, :1]).any(-1)
