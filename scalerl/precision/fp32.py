"""Everything in fp32: body and head, both sides (the upper bound on
numerical agreement, at the largest memory and time cost)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.precision.base import Heads, PrecisionConfig, linear_head


@dataclass
class Fp32Config(PrecisionConfig):
    pass


def fp32_heads(compute_dtype, *, cfg: Fp32Config) -> Heads:
    head = linear_head(torch.float32)
    return Heads(gen=head, train=head, body_dtype=torch.float32, gen_dtype=torch.float32)
