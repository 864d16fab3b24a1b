"""DAPO's overlong penalty (arXiv 2510.13786 §3.2):
R_len(y) = clip((L_max − |y|)/L_cache − 1, −1, 0), added to correct answers
only. L_max is ``max_new_tokens``; the penalty ramps from 0 at
L_max − L_cache to −1 at L_max.

The paper's rewards are ±1, so R_len spans half the gap between a correct
and a wrong answer. The rollout applies it in those units, scaled by
(task.correct_reward − task.wrong_reward)/2: ±1 rewards get R_len exactly, and
with {0, 1} a correct answer at the limit scores 0.5, never at or below a wrong one."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from scalerl.core.errors import check
from scalerl.length.base import LengthConfig, LengthLimits


@dataclass
class PenaltyConfig(LengthConfig):
    l_cache: int = 3
    """Width of the soft-penalty ramp in tokens (paper: 2k of 14k)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.l_cache <= self.max_new_tokens, "length.l_cache",
              f"must be in (0, length.max_new_tokens={self.max_new_tokens}], got {self.l_cache}")


def overlong_penalty(lengths, l_max: int, l_cache: int):
    """(n,) completion lengths -> (n,) penalty in [-1, 0]."""
    return ((l_max - lengths.float()) / l_cache - 1.0).clamp(-1.0, 0.0)


def penalty_limits(n: int, rng, *, cfg: PenaltyConfig) -> LengthLimits:
    return LengthLimits(penalty=partial(overlong_penalty, l_max=cfg.max_new_tokens, l_cache=cfg.l_cache))
