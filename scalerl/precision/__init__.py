"""Numerical precision of the LM head (config group ``precision``), arXiv 2510.13786 §3.2.

``fn(compute_dtype, *, cfg) -> Heads(gen, train, body_dtype, gen_dtype)`` (the ``HeadsFn``
contract in ``base.py``): which dtype the logits are computed in on the
generator side and on the trainer side, and which dtype the model body runs
in. The generator-vs-trainer log-prob mismatch is logged every step so this
axis's effect is visible.
"""
from scalerl.core.option import Option
from scalerl.precision import bf16, fp32, fp32_head

PRECISIONS: dict[str, Option] = {
    "fp32_head": Option(fp32_head.Fp32HeadConfig, fp32_head.fp32_head_heads),
    "bf16": Option(bf16.Bf16Config, bf16.bf16_heads),
    "fp32": Option(fp32.Fp32Config, fp32.fp32_heads),
}
