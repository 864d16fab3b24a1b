"""bf16 logits on both sides (the common default the paper improved on).
On CPU the body stays fp32; only the head is rounded to bf16, which is the
part of the precision gap this axis is about."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.precision.base import Heads, PrecisionConfig, linear_head


@dataclass
class Bf16Config(PrecisionConfig):
    pass


def bf16_heads(compute_dtype, *, cfg: Bf16Config) -> Heads:
    head = linear_head(torch.bfloat16)
    return Heads(gen=head, train=head, body_dtype=None, gen_dtype=torch.bfloat16)
