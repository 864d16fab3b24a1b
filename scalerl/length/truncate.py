"""Plain truncation: stop at ``max_new_tokens``; an unfinished answer is
graded as is (and usually scores 0)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.length.base import LengthConfig, LengthLimits


@dataclass
class TruncateConfig(LengthConfig):
    pass


def truncate_limits(n: int, rng, *, cfg: TruncateConfig) -> LengthLimits:
    return LengthLimits()
