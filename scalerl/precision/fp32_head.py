"""FP32 LM head (the ScaleRL choice, arXiv 2510.13786 §3.2, from MiniMax-M1): logits computed in
fp32 in both generator and trainer, the body in the compute dtype. On the
paper's baseline this raised A from 0.52 to 0.61; one side only helped
partially, hence the two switches."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check
from scalerl.core.lazy import torch
from scalerl.precision.base import BODY_DTYPES, Heads, PrecisionConfig, body_dtype, round_dtype


@dataclass
class Fp32HeadConfig(PrecisionConfig):
    generator: bool = True
    """fp32 head on the generator side (else bf16 logits there)."""
    trainer: bool = True
    """fp32 head on the trainer side (else bf16 logits there)."""
    generator_body: str = "auto"
    """The generator's own copy of the weights: engine (bf16 weights, as a serving engine holds them;
    computed in the trainer's body dtype, ``base.round_dtype``), auto (the trainer's weights), or a dtype
    the generator's body computes in: float32, bfloat16 or float16. The YAML's default is engine."""

    def __post_init__(self) -> None:
        check(self.generator_body in BODY_DTYPES, "precision.generator_body",
              f"must be one of {BODY_DTYPES}, got {self.generator_body!r}")

    def generator_body_setting(self) -> str:
        return self.generator_body


def fp32_head_heads(compute_dtype, *, cfg: Fp32HeadConfig) -> Heads:
    pick = lambda on: torch.float32 if on else torch.bfloat16
    return Heads(gen_dtype=pick(cfg.generator), train_dtype=pick(cfg.trainer), body_dtype=None,
                 gen_body_dtype=body_dtype(cfg.generator_body),
                 gen_round_dtype=round_dtype(cfg.generator_body))
