from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from omegaconf import MISSING

from scalerl.config.errors import check


@dataclass
class LengthConfig:
    name: str = MISSING
    max_new_tokens: int = 8
    """Budget of freely generated (thinking) tokens per completion."""
    alarm: float = 0.10
    """Warn when the step's truncation rate exceeds this (PAPER.md §3: 10-15% destabilized training)."""

    def __post_init__(self) -> None:
        check(self.max_new_tokens > 0, "length.max_new_tokens", f"must be > 0, got {self.max_new_tokens}")
        check(0 <= self.alarm <= 1, "length.alarm", f"must be in [0, 1], got {self.alarm}")


@dataclass
class LengthPlan:
    interrupt_at: Optional[torch.Tensor] = None
    """(n,) long free-token count at which to interrupt; None: never."""
    phrase: str = ""
    answer_budget: int = 0
    penalty: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    """lengths (n,) -> additive reward penalty (n,), applied to correct answers."""
