"""Pure reward functions. A completion is graded on its answer part: the text
after the last ``</think>`` if any (arXiv 2510.13786 §2 strips the thinking before
grading), with the EOS marker and surrounding whitespace removed."""
from __future__ import annotations

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


def exact_match_reward(completion: str, answer: str) -> float:
    """1.0 if the graded answer equals ``answer`` exactly, else 0.0.

    >>> exact_match_reward("0559<eos>", "0559")
    1.0
    >>> exact_match_reward("559<eos>", "0559")
    0.0
    """
    return 1.0 if answer_part(completion) == answer else 0.0
