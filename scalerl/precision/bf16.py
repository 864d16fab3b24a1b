"""bf16 logits on both sides (the common default the paper improved on).
On CPU the body stays fp32; only the head is rounded to bf16, which is the
part of the precision gap this axis is about."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.precision.base import GeneratorBodyConfig, Heads, body_dtype, round_dtype


@dataclass
class Bf16Config(GeneratorBodyConfig):
    """``generator_body``: GeneratorBodyConfig."""


def bf16_heads(compute_dtype, *, cfg: Bf16Config) -> Heads:
    return Heads(gen_dtype=torch.bfloat16, train_dtype=torch.bfloat16, body_dtype=None,
                 gen_body_dtype=body_dtype(cfg.generator_body),
                 gen_round_dtype=round_dtype(cfg.generator_body))
