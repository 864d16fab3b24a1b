"""bf16 logits on both sides (the common default the paper improved on).
On CPU the body stays fp32; only the head is rounded to bf16, which is the
part of the precision gap this axis is about."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.models.policy import linear_head
from scalerl.precision.base import Heads, PrecisionConfig


@dataclass
class Bf16Config(PrecisionConfig):
    name: str = "bf16"


def bf16_heads(cfg: Bf16Config, compute_dtype: torch.dtype) -> Heads:
    head = linear_head(torch.bfloat16)
    return Heads(gen=head, train=head, body_dtype=None)
