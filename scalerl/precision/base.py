from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from omegaconf import MISSING

from scalerl.models.policy import HeadFn


@dataclass
class PrecisionConfig:
    name: str = MISSING


@dataclass(frozen=True)
class Heads:
    gen: HeadFn
    train: HeadFn
    body_dtype: Optional[torch.dtype]
    """None: the run's compute dtype (bf16 on GPU, fp32 on CPU)."""
