"""``task=math``: problems with a final answer, graded with math-verify.

Records come from a local file; the field names default to Polaris-53K's
(``problem``, ``answer``), the math set of arXiv 2510.13786 §2. The grader strips
the thinking block first (no answer if it never closed), then compares the answer
with the reference through math-verify, so ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are
the same answer. A missing, unparsable or timed-out answer is wrong; grading never
raises.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Sequence

from omegaconf import MISSING

from scalerl.core.errors import check
from scalerl.tasks import data
from scalerl.tasks.base import Grades, Problem, TaskConfig, TaskData, reward_value
from scalerl.tasks.prompting import PromptConfig, render
from scalerl.tasks.rewards import final_answer, last_boxed

ANSWER_FORMATS = ("boxed", "any")
BOXED_INSTRUCTION = " Let's think step by step and output the final answer within \\boxed{}."


@dataclass
class MathConfig(TaskConfig):
    path: str = MISSING
    """Local .jsonl, .json or .parquet file of problems."""
    problem_field: str = "problem"
    """Field holding the problem statement (Polaris: problem)."""
    answer_field: str = "answer"
    """Field holding the reference answer (Polaris: answer)."""
    n_heldout: int = 1000
    """Held-out problems (arXiv 2510.13786 §2: 1,000), capped at half the distinct problems."""
    data_seed: int = 1234
    """Seed of the held-out split; independent of the run seed so every arm sees the same split."""
    answer_format: str = "boxed"
    """boxed: only the last \\boxed{...} of the answer counts; any: math-verify finds the answer anywhere in it."""
    grading_timeout_s: int = 5
    """math-verify's time limit per parse and per comparison (a timeout grades as wrong)."""
    prompt: PromptConfig = field(default_factory=lambda: PromptConfig(instruction=BOXED_INSTRUCTION))

    def __post_init__(self) -> None:
        super().__post_init__()
        data.check_path(self.path)
        check(self.n_heldout > 0, "task.n_heldout", f"must be > 0, got {self.n_heldout}")
        check(self.answer_format in ANSWER_FORMATS, "task.answer_format",
              f"must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        check(self.grading_timeout_s > 0, "task.grading_timeout_s", f"must be > 0, got {self.grading_timeout_s}")


def _timeout(seconds: int):
    """math-verify's timeout uses SIGALRM, which only the main thread may set."""
    return seconds if threading.current_thread() is threading.main_thread() else None


def _parse_gold(answer: str, timeout: int):
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    return parse(f"\\boxed{{{answer}}}", extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
                 parsing_timeout=_timeout(timeout))


def is_correct(completion: str, answer: str, *, prompt: str = "", answer_format: str = "boxed",
               timeout: int = 5) -> bool:
    """Does the completion's final answer equal ``answer``? Never raises.

    >>> is_correct("<think>half</think> so \\\\boxed{0.5}", "\\\\frac{1}{2}")
    True
    >>> is_correct("<think>\\\\boxed{0.5}", "1/2")
    False
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    try:
        text = final_answer(completion, prompt)
        if text is None:
            return False
        if answer_format == "boxed":
            boxed = last_boxed(text)
            if boxed is None or not boxed.strip():
                return False
            text = f"\\boxed{{{boxed}}}"
        pred = parse(text, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
                     parsing_timeout=_timeout(timeout))
        gold = _parse_gold(answer, timeout)
        if not pred or not gold:
            return False
        return bool(verify(gold, pred, timeout_seconds=_timeout(timeout)))
    except Exception:  # math-verify or sympy choking on junk: a wrong answer, not a crashed run
        return False


def sft_target(answer: str, answer_format: str) -> str:
    return f"\\boxed{{{answer}}}" if answer_format == "boxed" else answer


def load_problems(cfg: MathConfig, tokenizer=None, task: str = "math") -> tuple[list[Problem], list[Problem]]:
    """(train, held-out) problems of the file, distinct by problem text."""
    rows, seen, problems = data.read_records(cfg.path), set(), []
    for i, row in enumerate(rows):
        where = f"{cfg.path} row {i}"
        text = str(data.field(row, cfg.problem_field, "task.problem_field", where))
        answer = data.field(row, cfg.answer_field, "task.answer_field", where)
        if text in seen or answer is None or not str(answer).strip():
            continue  # duplicates would leak across the split; rows without an answer cannot be graded
        seen.add(text)
        problems.append(Problem(prompt=render(cfg.prompt, text, tokenizer), answer=str(answer).strip(), task=task,
                                uid=f"{i}:{data.fingerprint(text, str(answer))}"))
    check(len(problems) >= 2, "task.path", f"{cfg.path!r} has {len(problems)} usable problems; need at least 2")
    train, held = data.split(len(problems), cfg.n_heldout, cfg.data_seed)
    return [problems[i] for i in train], [problems[i] for i in held]


def build_math(cfg: MathConfig, *, tokenizer=None) -> TaskData:
    train, heldout = load_problems(cfg, tokenizer)

    def score(texts: Sequence[str], problems: Sequence[Problem]) -> Grades:
        ok = [is_correct(t, p.answer, prompt=p.prompt, answer_format=cfg.answer_format, timeout=cfg.grading_timeout_s)
              for t, p in zip(texts, problems)]
        return Grades(reward=[reward_value(cfg, float(c)) for c in ok], correct=ok)

    def sft_stream(seed: int):
        rng = random.Random(seed)
        while True:  # shuffled passes over the train pool, never the held-out split
            for p in rng.sample(train, len(train)):
                yield Problem(prompt=p.prompt, answer=sft_target(p.answer, cfg.answer_format), task=p.task, uid=p.uid)

    return TaskData(train=train, heldout=heldout, score=score, sft_stream=sft_stream, names=("math",),
                    correct_reward=cfg.correct_reward, wrong_reward=cfg.wrong_reward)
