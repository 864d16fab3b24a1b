"""Length control (config group ``length``), arXiv 2510.13786 §3.2.

``fn(n, rng, *, cfg) -> LengthLimits`` (the ``LengthFn`` contract in
``base.py``) says, for a batch of n samples, where (if anywhere) each is
interrupted and which reward penalty applies. The sampler applies the limits;
the rollout applies the penalty. Every option logs the truncation rate, the
paper's instability alarm (``alarm`` level).
"""
from scalerl.core.option import Option
from scalerl.length import interrupt, penalty, truncate

LENGTHS: dict[str, Option] = {
    "truncate": Option(truncate.TruncateConfig, truncate.truncate_limits),
    "interrupt": Option(interrupt.InterruptConfig, interrupt.interrupt_limits),
    "penalty": Option(penalty.PenaltyConfig, penalty.penalty_limits),
}
