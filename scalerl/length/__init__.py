"""Length control (config group ``length``), ScaleRL §3.

``fn(cfg, n, rng) -> LengthPlan`` says, for a batch of n samples, where (if
anywhere) each is interrupted and which reward penalty applies. The sampler
executes the plan; the loop applies the penalty. Every option logs the
truncation rate, the paper's instability alarm (``alarm`` level).
"""
from scalerl.config.registry import Option
from scalerl.length import interrupt, penalty, truncate

LENGTHS: dict[str, Option] = {
    "truncate": Option(truncate.TruncateConfig, truncate.truncate_plan),
    "interrupt": Option(interrupt.InterruptConfig, interrupt.interrupt_plan),
    "penalty": Option(penalty.PenaltyConfig, penalty.penalty_plan),
}
