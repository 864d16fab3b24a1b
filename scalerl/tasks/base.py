"""Task data types: problems, the task bundle, and the task config schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

from omegaconf import MISSING


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str
    kind: str = ""


@dataclass
class TaskConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""

    def __post_init__(self) -> None:
        pass


RewardFn = Callable[[str, str], float]
"""reward(completion_text, answer) -> float; pure, see ``rewards.py``."""


@dataclass
class TaskData:
    train: list[Problem]
    heldout: list[Problem]
    reward: RewardFn
    sft_stream: Callable[[int], Iterator[Problem]]
    """seed -> infinite iterator of supervised warm-start problems."""


class BuildTaskFn(Protocol):
    """A task's config -> its data: train pool, held-out split, reward."""

    def __call__(self, cfg: TaskConfig) -> TaskData: ...
