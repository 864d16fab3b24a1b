"""Length interruptions (the ScaleRL choice, arXiv 2510.13786 §3.2): at a random length in
[lo, hi]·max_new_tokens (the paper: 10k-12k of a 12,288 thinking budget),
append the end-of-thinking phrase and let the model answer within
``answer_budget`` more tokens. Only a completion that is still thinking is
interrupted: one that already closed its thinking with ``think_end`` is
writing its answer (the grader keeps only the text after the last marker)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.length.base import LengthConfig, LengthLimits

PAPER_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"


@dataclass
class InterruptConfig(LengthConfig):
    lo: float = 0.8
    """Earliest interruption point as a fraction of max_new_tokens (paper: 10k/12,288 ≈ 0.81)."""
    hi: float = 1.0
    """Latest interruption point as a fraction of max_new_tokens."""
    answer_budget: int = 6
    """Tokens allowed after the phrase (paper: 2,048)."""
    phrase: str = PAPER_PHRASE
    think_end: str = "</think>"
    """The end-of-thinking marker; a completion that wrote it is answering and is never interrupted."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.lo <= self.hi <= 1, "length.lo", f"need 0 < length.lo <= length.hi <= 1, got lo={self.lo}, hi={self.hi}")
        check(self.answer_budget > 0, "length.answer_budget", f"must be > 0, got {self.answer_budget}")
        check(self.answer_budget <= self.max_new_tokens, "length.answer_budget",
              f"must not exceed the total budget length.max_new_tokens={self.max_new_tokens}, got {self.answer_budget}")
        check(len(self.phrase) > 0, "length.phrase", "must not be empty")
        check(len(self.think_end) > 0, "length.think_end", "must not be empty")

    def completion_budget(self, phrase_tokens=None) -> int:
        phrase = len(self.phrase) if phrase_tokens is None else phrase_tokens
        return self.max_new_tokens + phrase + self.answer_budget

    def forced_phrase(self) -> str:
        return self.phrase

    def bounds(self) -> tuple[int, int]:
        """Inclusive token range of interruption points."""
        lo = max(1, math.ceil(self.lo * self.max_new_tokens))
        return lo, max(lo, math.floor(self.hi * self.max_new_tokens))


def interrupt_limits(n: int, rng, *, cfg: InterruptConfig) -> LengthLimits:
    lo, hi = cfg.bounds()
    at = torch.randint(lo, hi + 1, (n,), generator=rng)
    return LengthLimits(interrupt_at=at, phrase=cfg.phrase, answer_budget=cfg.answer_budget, think_end=cfg.think_end)
