"""FP32 LM head (the ScaleRL choice, arXiv 2510.13786 §3.2, from MiniMax-M1): logits computed in
fp32 in both generator and trainer, the body in the compute dtype. On the
paper's baseline this raised A from 0.52 to 0.61; one side only helped
partially, hence the two switches."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.precision.base import GeneratorBodyConfig, Heads, body_dtype, round_dtype


@dataclass
class Fp32HeadConfig(GeneratorBodyConfig):
    generator: bool = True
    """fp32 head on the generator side (else bf16 logits there)."""
    trainer: bool = True
    """fp32 head on the trainer side (else bf16 logits there)."""


def fp32_head_heads(compute_dtype, *, cfg: Fp32HeadConfig) -> Heads:
    pick = lambda on: torch.float32 if on else torch.bfloat16
    return Heads(gen_dtype=pick(cfg.generator), train_dtype=pick(cfg.trainer), body_dtype=None,
                 gen_body_dtype=body_dtype(cfg.generator_body),
                 gen_round_dtype=round_dtype(cfg.generator_body))
