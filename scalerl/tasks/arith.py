"""The embedded verifiable task: fixed-width integer arithmetic.

``042+517=`` -> ``0559``. A mix of problem kinds gives the tiny model a
natural ceiling below 100%: additions are learnable by RL on CPU
(docs/embedded.md), multiplications mostly are not, so the held-out pass
rate bends and plateaus like the paper's curves instead of running to 1.
The train pool and the held-out split are fixed by ``task.data_seed`` and
disjoint; the warm start samples fresh problems outside the held-out split.

Reasoning shape (``task.think``): the paper's completions think, then answer
(arXiv 2510.13786 §2: graded after stripping ``<think>…</think>``). With
``task.think > 0`` that fraction of the warm start's demonstrations writes a
scratchpad of column additions, least significant digit first with the carry in,
before the answer (``<think>2+7+0=09 4+1+0=05 0+5+0=05</think>0559``); the rest
answer directly. Thinking helps a tiny model (each column is a one-digit sum), so
RL can learn to think more, and the length axis (interruptions, penalties,
truncation) has a thinking part to act on. Products have no scratchpad by default:
they stay the ceiling. ``task.think_mul > 0`` shows that share of the first phase's
product demonstrations a scratchpad of column products (``product_scratchpad``): a
rare fork that RL can learn to take (docs/embedded.md, "A miniature whose ceiling the
recipe decides"). The grader reads only the text after the last ``</think>``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from scalerl.core.errors import check
from scalerl.length.interrupt import PAPER_PHRASE
from scalerl.tasks.base import Grades, Problem, TaskConfig, TaskData, reward_value
from scalerl.tasks.rewards import THINK_END, THINK_START, exact_match_reward

# kind -> (operator, operand digits, answer digits)
KINDS: dict[str, tuple[str, int, int]] = {
    "add2": ("+", 2, 3),
    "add3": ("+", 3, 4),
    "add4": ("+", 4, 5),
    "mul1": ("*", 1, 2),
    "mul2": ("*", 2, 4),
}


@dataclass
class ArithConfig(TaskConfig):
    mix: dict[str, float] = field(default_factory=lambda: {"add3": 0.75, "mul2": 0.25})
    """Problem kinds and their weights (kinds: add2, add3, add4, mul1, mul2)."""
    n_train: int = 32768
    """Size of the RL train pool (an epoch is one pass over it; the default run stays in its first)."""
    n_heldout: int = 512
    """Size of the fixed held-out split the pass rate is measured on."""
    data_seed: int = 1234
    """Seed of the problem generator; independent of the run seed so every arm sees the same split."""

    def train_pool_size(self) -> int:
        return self.n_train
    think: float = 0.0
    """Fraction of warm-start demonstrations that think (a scratchpad of column sums) before answering
    additions; the rest answer directly. 0: answers only, the completions are a few tokens."""
    think_final: Optional[float] = None
    """Fraction of the demonstrations of the warm start's last ``model.warmstart.final_steps`` steps that
    think through every column; the others think briefly (their first columns only) and then answer.
    Low, so that the policy RL starts from thinks too briefly and RL has to learn that thinking longer
    pays, the embedded default's rise (docs/embedded.md); None: those steps use ``task.think``'s demonstrations."""
    think_mul: float = 0.0
    """Fraction of the warm start's first-phase product demonstrations that write their column products
    (``product_scratchpad``) before answering; never in its final steps. Small, so that the policy RL starts
    from opens that thought rarely: a low-probability fork whose completions are right far more often
    than its direct answers (docs/embedded.md). 0: products have no scratchpad."""
    interrupted: float = 0.1
    """Fraction of thinking demonstrations cut short after a random column by the paper's interruption
    phrase, then answered: a tiny model has never read English, so it learns here that an answer
    follows the phrase (length=interrupt, arXiv 2510.13786 §3.2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = set(self.mix) - set(KINDS)
        check(not unknown, "task.mix", f"unknown kinds {sorted(unknown)}; choose from {sorted(KINDS)}")
        check(self.mix and all(w >= 0 for w in self.mix.values()) and sum(self.mix.values()) > 0,
              "task.mix", "weights must be non-negative and not all zero")
        check(self.n_train > 0, "task.n_train", f"must be > 0, got {self.n_train}")
        check(self.n_heldout > 0, "task.n_heldout", f"must be > 0, got {self.n_heldout}")
        # Distinct problems the mix can make: both splits must fit, or drawing them never ends.
        capacity = sum((10 ** KINDS[k][1]) ** 2 for k, w in self.mix.items() if w > 0)
        check(self.n_train + self.n_heldout <= capacity, "task.mix",
              f"its kinds {sorted(k for k, w in self.mix.items() if w > 0)} make {capacity} distinct problems, fewer "
              f"than task.n_train + task.n_heldout = {self.n_train + self.n_heldout}; add kinds or lower task.n_train")
        check(0.0 <= self.think <= 1.0, "task.think", f"must be a fraction in [0, 1], got {self.think}")
        check(self.think_final is None or 0.0 <= self.think_final <= 1.0, "task.think_final",
              f"must be a fraction in [0, 1] or null, got {self.think_final}")
        check(0.0 <= self.think_mul <= 1.0, "task.think_mul", f"must be a fraction in [0, 1], got {self.think_mul}")
        check(0.0 <= self.interrupted <= 1.0, "task.interrupted", f"must be a fraction in [0, 1], got {self.interrupted}")


def make_problem(kind: str, rng: random.Random) -> Problem:
    op, digits, out_digits = KINDS[kind]
    a, b = rng.randrange(10**digits), rng.randrange(10**digits)
    value = a + b if op == "+" else a * b
    prompt = f"{a:0{digits}d}{op}{b:0{digits}d}="
    return Problem(prompt=prompt, answer=f"{value:0{out_digits}d}", kind=kind, task="arith", uid=prompt)


def scratchpad(prompt: str) -> str:
    """The column additions of an addition prompt, least significant first, each with its carry in
    and its two-digit sum (whose first digit is the next carry); "" for other operators.

    >>> scratchpad("042+517=")
    '2+7+0=09 4+1+0=05 0+5+0=05'
    >>> scratchpad("95+18=")
    '5+8+0=13 9+1+1=11'
    >>> scratchpad("12*34=")
    ''
    """
    if "+" not in prompt:
        return ""
    a, b = prompt.rstrip("=").split("+")
    cols, carry = [], 0
    for x, y in zip(reversed(a), reversed(b)):
        total = int(x) + int(y) + carry
        cols.append(f"{x}+{y}+{carry}={total:02d}")
        carry = total // 10
    return " ".join(cols)


def product_scratchpad(prompt: str) -> str:
    """The column products of a product prompt, least significant first: column k adds the digit
    products x*y whose places sum to k (the first operand's higher digit first) and the carry in, and
    writes the total at the width its largest possible value needs (99*99's), so that its last digit is
    the answer's and the digits before it are the next carry in, copied as written. The answer reads as
    an addition's does: the last carry, then every column's last digit. "" for other operators.

    Every step is a few one-digit products and a sum, like an addition's column; the whole thought
    (32 characters for two-digit operands) closes before ``length=interrupt`` cuts at 0.8 x 64 tokens.

    >>> product_scratchpad("47*36=")
    '7*6+0=42 4*6+7*3+4=049 4*3+04=16'
    >>> product_scratchpad("99*99=")
    '9*9+0=81 9*9+9*9+8=170 9*9+17=98'
    >>> product_scratchpad("7*6=")
    '7*6+0=42'
    >>> product_scratchpad("042+517=")
    ''
    """
    if "*" not in prompt:
        return ""
    a, b = (x[::-1] for x in prompt.rstrip("=").split("*"))  # digits, least significant first
    cols, carry, carry_text, top = [], 0, "0", 0
    for k in range(len(a) + len(b) - 1):
        pairs = [(i, k - i) for i in reversed(range(len(a))) if 0 <= k - i < len(b)]
        top = 81 * len(pairs) + top // 10  # the column's largest total: 9*9 each, plus the largest carry
        total = sum(int(a[i]) * int(b[j]) for i, j in pairs) + carry
        text = f"{total:0{len(str(top))}d}"
        cols.append("+".join(f"{a[i]}*{b[j]}" for i, j in pairs) + f"+{carry_text}={text}")
        carry, carry_text = total // 10, text[:-1]
    return " ".join(cols)


def product_demonstration(p: Problem) -> Problem:
    """The warm start's target for a product that thinks: its column products, then the answer.

    >>> product_demonstration(make_problem("mul2", random.Random(0))).answer  # 49*97
    '<think>9*7+0=63 4*7+9*9+6=115 4*9+11=47</think>4753'
    """
    return Problem(prompt=p.prompt, answer=f"{THINK_START}{product_scratchpad(p.prompt)}{THINK_END}{p.answer}",
                   kind=p.kind, task=p.task, uid=p.uid)


def demonstration(p: Problem, thinks: bool, cut: int = 0, brief: bool = False) -> Problem:
    """The warm start's target for ``p``: its scratchpad in a thinking block, then the answer; or the
    answer alone (no scratchpad for the operator, or ``thinks`` false). ``cut > 0`` keeps only that
    many columns and closes the thought with the interruption phrase instead, or, ``brief``, with the
    end of thinking itself: a thought too short to carry the answer's higher digits.

    >>> demonstration(make_problem("add2", random.Random(0)), True).answer
    '<think>9+7+0=16 4+9+1=14</think>146'
    >>> demonstration(make_problem("add2", random.Random(0)), True, cut=1).answer[:30]
    '<think>9+7+0=16 Okay, time is '
    >>> demonstration(make_problem("add2", random.Random(0)), True, cut=1, brief=True).answer
    '<think>9+7+0=16</think>146'
    """
    pad = scratchpad(p.prompt) if thinks else ""
    if pad and cut:
        kept = " ".join(pad.split(" ")[:cut])
        thought = kept if brief else kept + " " + PAPER_PHRASE.removesuffix(THINK_END)
    else:
        thought = pad
    return Problem(prompt=p.prompt, answer=f"{THINK_START}{thought}{THINK_END}{p.answer}" if pad else p.answer,
                   kind=p.kind, task=p.task, uid=p.uid)


def demonstrations(stream: "ProblemStream", think: float, interrupted: float, seed: int, *, brief: bool = False,
                   think_mul: float = 0.0):
    """Warm-start problems whose ``answer`` is the completion to imitate (``TaskData.sft_stream``).

    A ``think`` fraction thinks through every column (``interrupted`` of those are cut by the phrase);
    the rest answer directly or, with ``brief``, after a thought of their first columns. A ``think_mul``
    fraction of the products writes its column products; the rest answer directly."""
    rng = random.Random(seed)
    for p in stream:
        thinks = rng.random() < think
        columns = KINDS[p.kind][1]
        # Drawn only when asked for, so that think_mul=0 leaves every other draw, and so the shipped
        # warm starts' demonstrations, as they were.
        if think_mul and KINDS[p.kind][0] == "*" and rng.random() < think_mul:
            yield product_demonstration(p)
        elif thinks:
            cut = rng.randrange(1, columns) if columns > 1 and rng.random() < interrupted else 0
            yield demonstration(p, True, cut)
        elif brief and columns > 1:
            yield demonstration(p, True, rng.randrange(1, columns), brief=True)
        else:
            yield demonstration(p, False)


class ProblemStream:
    """Infinite weighted stream of problems, excluding a set of prompts."""

    def __init__(self, mix: dict[str, float], seed: int, exclude: frozenset[str] = frozenset()):
        self.kinds = [k for k, w in mix.items() if w > 0]
        self.weights = [mix[k] for k in self.kinds]
        self.rng = random.Random(seed)
        self.exclude = exclude

    def __next__(self) -> Problem:
        while True:
            p = make_problem(self.rng.choices(self.kinds, self.weights)[0], self.rng)
            if p.prompt not in self.exclude:
                return p

    def __iter__(self):
        return self


def unique_problems(stream: ProblemStream, n: int, exclude: set[str]) -> list[Problem]:
    out, seen = [], set(exclude)
    for p in stream:
        if p.prompt not in seen:
            seen.add(p.prompt)
            out.append(p)
            if len(out) == n:
                return out
    raise AssertionError("unreachable")


def build_arith(cfg: ArithConfig, *, tokenizer=None) -> TaskData:
    """The prompt is the bare problem: the embedded tiny model has no chat template."""
    stream = ProblemStream(dict(cfg.mix), cfg.data_seed)
    heldout = unique_problems(stream, cfg.n_heldout, set())
    train = unique_problems(stream, cfg.n_train, {p.prompt for p in heldout})
    frozen_heldout = frozenset(p.prompt for p in heldout)

    def sft(think: float, brief: bool = False, think_mul: float = 0.0):
        return lambda seed: demonstrations(ProblemStream(dict(cfg.mix), seed, exclude=frozen_heldout),
                                           think, cfg.interrupted, seed, brief=brief, think_mul=think_mul)

    final = None if cfg.think_final is None else sft(cfg.think_final, brief=True)
    if final is None and cfg.think_mul:  # the product scratchpad stays out of the final steps
        final = sft(cfg.think)

    return TaskData(
        train=train,
        heldout=heldout,
        score=lambda texts, problems: _grade(cfg, [exact_match_reward(t, p.answer) == 1.0 for t, p in zip(texts, problems)]),
        # Warm-start (SFT) data: fresh problems, never the held-out split.
        sft_stream=sft(cfg.think, think_mul=cfg.think_mul),
        sft_final_stream=final,
        names=("arith",),
        correct_reward=cfg.correct_reward,
        wrong_reward=cfg.wrong_reward,
    )


def _grade(cfg: ArithConfig, ok: list[bool]) -> Grades:
    return Grades(reward=[reward_value(cfg, float(c)) for c in ok], correct=ok)
