"""The GPU tests' mixed-precision checks (``tests/gpu/test_gpu.py``) on the CPU: a bf16 body with
an fp32 head and fp32 master weights, sharded by FSDP2 on one gloo rank. The code paths are the
ones a GPU takes (only the kernels differ), so these keep the GPU tests' own code honest where
no GPU is (see ``tests/mixed_precision.py``)."""
from __future__ import annotations

import torch
from mixed_precision import check_bf16_step, check_sharded_round_trip

from scalerl.config import compose, validate

BF16_CPU = ["logger=none", "train.device=cpu", "train.threads=1", "model.warmstart.enabled=false",
            "train.eval_samples=1", "model.dtype=bfloat16", "precision=fp32_head"]


def test_bf16_step_with_fp32_head_and_master_weights_on_cpu():
    cfg = validate(compose([*BF16_CPU, "batch.prompts=8", "batch.generations=8"]))
    mean = check_bf16_step(cfg, torch.device("cpu"), label="tiny bf16 body, fp32 head (CPU)", max_mean_dlogp=0.05)
    assert mean > 1e-5  # bf16 kernels on both sides, rounding differently: not the fp32 path's ~1e-7


def test_sharded_checkpoint_round_trip_on_cpu(tmp_path):
    cfg = validate(compose([*BF16_CPU, "batch.prompts=4", "batch.generations=4"]))
    check_sharded_round_trip(cfg, torch.device("cpu"), tmp_path)
