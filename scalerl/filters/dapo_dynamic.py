"""DAPO dynamic sampling: drop zero-variance groups, then keep generating new
prompts until the batch is full of groups with signal (or the refill rounds
run out). More generation compute per step, a full effective batch."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.filters.base import FilterConfig


@dataclass
class DapoDynamicConfig(FilterConfig):
    max_refill_rounds: int = 3
    """Extra generation rounds allowed per step when refilling."""

    def __post_init__(self) -> None:
        check(self.max_refill_rounds >= 1, "filter.max_refill_rounds", f"must be >= 1, got {self.max_refill_rounds}")

    @property
    def refill_rounds(self) -> int:
        return self.max_refill_rounds
