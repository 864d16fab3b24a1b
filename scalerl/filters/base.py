from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING


@dataclass
class FilterConfig:
    name: str = MISSING
    npr_threshold: Optional[float] = None
    """Retire prompts whose pass rate is >= this for later epochs (None: never)."""
    refill: bool = False
    """Regenerate until the batch is full of non-degenerate groups (DAPO)."""
    max_refill_rounds: int = 0
    """Extra generation rounds allowed per step when refilling."""
