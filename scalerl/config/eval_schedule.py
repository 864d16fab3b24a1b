"""When a run evaluates: the steps of its held-out eval rows (``train.eval_*``).

The fit's x-axis is log compute (arXiv 2510.13786 §1, docs/analysis.md), and compute grows about
linearly with steps, so evals every N steps put most points on the plateau and few on the rise
that fixes B and C_mid. The default spreads them evenly in log steps instead; ``train.eval_every``
brings back the every-N schedule. Both always include step 0 (R0) and the last step.
"""
from __future__ import annotations

import math
from typing import Optional


def eval_steps(steps: int, *, every: Optional[int] = None, points: int = 16, first: int = 10) -> list[int]:
    """The sorted steps that get an eval row.

    ``every`` set: 0, every, 2*every, ... and ``steps``. Else ``points`` steps evenly spaced in
    log steps from ``first`` to ``steps`` (rounded; those that round to the same step merge),
    plus step 0. A run shorter than ``first`` evaluates at 0 and its last step.

    >>> eval_steps(300, points=4, first=10)   # 10 * 30^(k/3): 10, 31.07, 96.55, 300
    [0, 10, 31, 97, 300]
    >>> eval_steps(45, every=20)
    [0, 20, 40, 45]
    """
    if every is not None:
        return sorted({*range(0, steps + 1, every), steps})
    if steps <= first or points < 2:
        return sorted({0, steps})
    ratio = math.log(steps / first) / (points - 1)
    return sorted({0, steps, *(int(round(first * math.exp(k * ratio))) for k in range(points))})
