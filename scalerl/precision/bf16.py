"""bf16 logits on both sides (the common default the paper improved on).
On CPU the body stays fp32; only the head is rounded to bf16, which is the
part of the precision gap this axis is about."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.precision.base import BODY_DTYPES, Heads, PrecisionConfig, body_dtype, round_dtype


@dataclass
class Bf16Config(PrecisionConfig):
    generator_body: str = "auto"
    """The generator's own copy of the weights: engine (bf16 weights, as a serving engine holds them;
    computed in the trainer's body dtype, ``base.round_dtype``), auto (the trainer's weights), or a dtype
    the generator's body computes in: float32, bfloat16 or float16. The YAML's default is engine."""

    def __post_init__(self) -> None:
        check(self.generator_body in BODY_DTYPES, "precision.generator_body",
              f"must be one of {BODY_DTYPES}, got {self.generator_body!r}")

    def generator_body_setting(self) -> str:
        return self.generator_body


def bf16_heads(compute_dtype, *, cfg: Bf16Config) -> Heads:
    return Heads(gen_dtype=torch.bfloat16, train_dtype=torch.bfloat16, body_dtype=None,
                 gen_body_dtype=body_dtype(cfg.generator_body),
                 gen_round_dtype=round_dtype(cfg.generator_body))
