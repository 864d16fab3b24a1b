"""Pure reward functions. A completion is graded on its answer part: the text
after the last ``</think>`` if any (arXiv 2510.13786 §2 strips the thinking before
grading), with the EOS marker and surrounding whitespace removed. A completion
that opened a thinking block and never closed it has no answer."""
from __future__ import annotations

from typing import Optional

THINK_START = "<think>"
THINK_END = "</think>"


def answer_part(completion: str, eos: str = "<eos>") -> str:
    """Text the grader sees.

    >>> answer_part("12Okay, time is up. </think>0559<eos>")
    '0559'
    >>> answer_part(" 0559 <eos><pad>")
    '0559'
    """
    text = completion.rsplit(THINK_END, 1)[-1]
    text = text.split(eos, 1)[0]
    return text.replace("<pad>", "").strip()


def opens_thinking(prompt: str) -> bool:
    """True if the prompt leaves a thinking block open (chat templates of reasoning
    models end the generation prompt with ``<think>``)."""
    return prompt.rfind(THINK_START) > prompt.rfind(THINK_END)


def final_answer(completion: str, prompt: str = "", eos: str = "<eos>") -> Optional[str]:
    """The answer part, or None when the thinking block was never closed.

    >>> final_answer("<think>so 1/2</think> \\\\boxed{1/2}")
    '\\\\boxed{1/2}'
    >>> final_answer("<think>so \\\\boxed{1/2}") is None
    True
    >>> final_answer("still thinking", prompt="<|user|>q<think>") is None
    True
    >>> final_answer("no thinking at all: 7")
    'no thinking at all: 7'
    """
    if THINK_END not in completion and (THINK_START in completion or opens_thinking(prompt)):
        return None
    return answer_part(completion, eos)


def last_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None.

    >>> last_boxed("a \\\\boxed{1} then \\\\boxed{\\\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> last_boxed("\\\\boxed{unclosed") is None
    True
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def exact_match_reward(completion: str, answer: str) -> float:
    """1.0 if the graded answer equals ``answer`` exactly, else 0.0.

    >>> exact_match_reward("0559<eos>", "0559")
    1.0
    >>> exact_match_reward("559<eos>", "0559")
    0.0
    """
    return 1.0 if answer_part(completion) == answer else 0.0
