"""The length-control contract, the shared schema and the limits it returns."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from omegaconf import MISSING

from scalerl.core.errors import check

if TYPE_CHECKING:
    from torch import Generator, Tensor


@dataclass
class LengthConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""
    max_new_tokens: int = 8
    """Budget of freely generated (thinking) tokens per completion."""
    alarm: float = 0.10
    """Warn when the step's truncation rate exceeds this (arXiv 2510.13786 §3.2: 10-15% destabilized training)."""

    def __post_init__(self) -> None:
        check(self.max_new_tokens > 0, "length.max_new_tokens", f"must be > 0, got {self.max_new_tokens}")
        check(0 <= self.alarm <= 1, "length.alarm", f"must be in [0, 1], got {self.alarm}")

    def completion_budget(self, phrase_tokens: Optional[int] = None) -> int:
        """The most tokens one completion can hold. ``phrase_tokens``: the forced
        phrase's length in tokens (None: its length in characters, an upper bound)."""
        return self.max_new_tokens

    def forced_phrase(self) -> str:
        """The text the option appends to a completion (an interruption's phrase); "" for none."""
        return ""


@dataclass
class LengthLimits:
    interrupt_at: Optional[Tensor] = None
    """(n,) long free-token count at which to interrupt; None: never."""
    phrase: str = ""
    answer_budget: int = 0
    think_end: str = ""
    """The marker that closes thinking: a completion that wrote it is answering and is not interrupted."""
    penalty: Optional[Callable[[Tensor], Tensor]] = None
    """lengths (n,) -> reward penalty (n,) in [-1, 0], added to correct answers in units of
    half the task's reward gap, (correct_reward - wrong_reward) / 2: with the paper's ±1
    rewards that is R_len exactly, and a correct answer always scores above a wrong one."""

    def select(self, rows: slice) -> "LengthLimits":
        """The limits of ``rows`` of the batch it was drawn for (one rank's share)."""
        at = None if self.interrupt_at is None else self.interrupt_at[rows]
        return replace(self, interrupt_at=at)


class LengthFn(Protocol):
    """The limits for a batch of ``n`` completions, drawing any randomness from ``rng``."""

    def __call__(self, n: int, rng: Generator) -> LengthLimits: ...
