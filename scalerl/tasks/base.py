"""Task data types: problems, grades, the task bundle, and the task config schema."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Protocol, Sequence

from omegaconf import MISSING

from scalerl.core.errors import check


@dataclass(frozen=True)
class Problem:
    prompt: str
    """The model's input text, already rendered (chat or plain template, ``prompting.py``)."""
    answer: str
    """The reference answer the grader compares with ("" for code: its tests grade it)."""
    kind: str = ""
    """A finer label inside a task (arith: add3, mul2); metrics get ``pass_rate/<kind>``."""
    task: str = ""
    """The task it comes from (math, code, arith, or a ``mix`` entry); metrics get ``pass_rate/<task>``."""
    tests: Optional[object] = None
    """What a code grader runs (``code.CodeTests``); None for tasks graded against ``answer``."""
    uid: str = ""
    """Stable identity within its task (the source row), recorded in the run's held-out split."""


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

    def train_pool_size(self) -> Optional[int]:
        """The size of the train pool when the config fixes it (None: the data decides)."""
        return None

    def imitable(self) -> bool:
        """The task has answers a supervised warm start can imitate (``TaskData.sft_stream``)."""
        return True


@dataclass
class Grades:
    """The grades of a batch of completions, one entry per completion."""

    reward: list[float]
    """Task reward: ``wrong_reward`` + fraction correct * (``correct_reward`` - ``wrong_reward``)."""
    correct: list[bool]
    """Fully correct (every test passed); the pass rate is their mean."""
    flags: dict[str, list[bool]] = field(default_factory=dict)
    """Per-completion outcome flags a task reports (code: ``timeout``, ``crash``), averaged
    into ``<flag>_rate/<task>`` metrics."""


ScoreFn = Callable[[Sequence[str], Sequence[Problem]], Grades]
"""score(completion_texts, problems) -> Grades, one problem per completion. Batched so
that a task can grade in parallel (code runs its sandboxes concurrently)."""


def reward_value(cfg: TaskConfig, fraction: float) -> float:
    """Map a graded fraction in [0, 1] onto the task's reward range.

    >>> reward_value(TaskConfig(correct_reward=1.0, wrong_reward=-1.0), 0.75)
    0.5
    """
    return cfg.wrong_reward + fraction * (cfg.correct_reward - cfg.wrong_reward)


@dataclass
class TaskData:
    train: list[Problem]
    heldout: list[Problem]
    score: ScoreFn
    sft_stream: Optional[Callable[[int], Iterator[Problem]]]
    """seed -> infinite iterator of supervised warm-start problems whose ``answer`` is the
    completion to imitate; None when the task has no targets to imitate (code)."""
    sft_final_stream: Optional[Callable[[int], Iterator[Problem]]] = None
    """The same for the warm start's last ``model.warmstart.final_steps`` steps; None: ``sft_stream``."""
    names: tuple[str, ...] = ()
    """The task names that appear in ``Problem.task`` (one, or a mix's entries)."""
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Task name -> the outcome flags ``score`` reports for its problems (code: timeout, crash)."""
    correct_reward: float = 1.0
    """The training reward of a correct answer (``task.correct_reward``); the overlong
    penalty is scaled by half the gap to ``wrong_reward``."""
    wrong_reward: float = 0.0
    """The training reward of a wrong one (``task.wrong_reward``)."""


class BuildTaskFn(Protocol):
    """A task's config (and the model's tokenizer, for prompting) -> its data."""

    def __call__(self, cfg: TaskConfig, *, tokenizer=None) -> TaskData: ...
