"""Everything in fp32: body and head, both sides (the upper bound on
numerical agreement, at the largest memory and time cost)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from scalerl.models.policy import linear_head
from scalerl.precision.base import Heads, PrecisionConfig


@dataclass
class Fp32Config(PrecisionConfig):
    name: str = "fp32"


def fp32_heads(cfg: Fp32Config, compute_dtype: torch.dtype) -> Heads:
    head = linear_head(torch.float32)
    return Heads(gen=head, train=head, body_dtype=torch.float32)
