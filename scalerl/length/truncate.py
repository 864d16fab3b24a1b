"""Plain truncation: stop at ``max_new_tokens``; an unfinished answer is
graded as is (and usually scores 0)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.length.base import LengthConfig, LengthPlan


@dataclass
class TruncateConfig(LengthConfig):
    name: str = "truncate"


def truncate_plan(cfg: TruncateConfig, n: int, rng) -> LengthPlan:
    return LengthPlan()
