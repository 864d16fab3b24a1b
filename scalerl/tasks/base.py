"""Task data types: problems, the task bundle, and the task config schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from omegaconf import MISSING

from scalerl.core.errors import check


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    kind: str = ""


@dataclass
class TaskConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""
    correct_reward: float = 1.0
    """Reward of a correct answer (arXiv 2510.13786 §2 uses ±1: set task.wrong_reward=-1)."""
    wrong_reward: float = 0.0
    """Reward of a wrong, missing or unparsable answer."""

    def __post_init__(self) -> None:
        check(self.correct_reward > self.wrong_reward, "task.correct_reward",
              f"must be > task.wrong_reward={self.wrong_reward}, got {self.correct_reward}")


RewardFn = Callable[[str, str], float]
"""reward(completion_text, answer) -> 1.0 if correct else 0.0; pure, see ``rewards.py``.
The rollout maps it to ``correct_reward`` / ``wrong_reward``."""


@dataclass
class TaskData:
    train: list[Problem]
    heldout: list[Problem]
    reward: RewardFn
    sft_stream: Callable[[int], Iterator[Problem]]
    """seed -> infinite iterator of supervised warm-start problems."""
    correct_reward: float = 1.0
    """The training reward of a correct answer (``task.correct_reward``)."""
    wrong_reward: float = 0.0
    """The training reward of a wrong one (``task.wrong_reward``)."""


class BuildTaskFn(Protocol):
    """A task's config -> its data: train pool, held-out split, reward."""

    def __call__(self, cfg: TaskConfig) -> TaskData: ...
