"""The GPU path: bf16 compute with fp32 master weights (FSDP2 mixed precision) and the fp32 LM
head, on CUDA. The tiny model runs without its warm start (these test the machinery, not learning).

What used to break on CUDA, each covered here: the sampling RNG (a CPU generator given to CUDA
tensors), advantages built on the CPU and multiplied with CUDA log-probs, CPU tensors given to
NCCL collectives, and bf16 weights updated in place with no fp32 master copy.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from gpu_models import build_random_qwen2
from helpers import REPO, read_rows
from mixed_precision import check_bf16_step, check_sharded_round_trip

from scalerl.config import compose, validate
from scalerl.train.loop import train

CUDA = ["logger=none", "train.device=cuda", "model.warmstart.enabled=false", "train.eval_samples=1"]


def cfg_of(*overrides: str):
    return validate(compose([*CUDA, *overrides]))


def test_rl_run_of_the_tiny_model_on_cuda(tmp_path):
    """The whole loop on one GPU: rollout, update, eval, sharded checkpoints, HF export."""
    out = train(cfg_of("train.steps=2", "train.eval_every=1", "filter=none"), tmp_path / "r", run_name="r",
                group="gpu", config_dict={})
    assert out["status"] == "done"
    steps = read_rows(tmp_path / "r" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2] and all(s["nonfinite"] == 0 for s in steps)
    assert all(math.isfinite(s["loss"]) for s in steps)
    assert (tmp_path / "r" / "checkpoints" / "step_00000002" / ".metadata").exists()  # sharded: bf16 body
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "r" / "final_policy")
    assert exported.dtype == torch.bfloat16


def test_rl_step_of_a_05b_qwen2_model_in_bf16_with_the_fp32_head(tmp_path):
    path = build_random_qwen2(tmp_path / "qwen2")
    cfg = cfg_of("model=hf", f"model.path={path}", "batch.prompts=8", "batch.generations=8", "precision=fp32_head")
    check_bf16_step(cfg, torch.device("cuda"), label="0.5B bf16 body, fp32 head", max_mean_dlogp=0.05)


def test_sharded_checkpoint_round_trip_on_cuda(tmp_path):
    check_sharded_round_trip(cfg_of("batch.prompts=4", "batch.generations=4"), torch.device("cuda"), tmp_path)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_rank_fsdp2_run_on_two_gpus(tmp_path):
    env = {**os.environ, "SCALERL_NO_BAR": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "scalerl.sweep",
           *CUDA, "train.steps=3", "train.eval_every=3", "filter=none", f"hydra.run.dir={tmp_path / 'r'}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads((tmp_path / "r" / "derived.json").read_text())["world_size"] == 2
    assert [s["step"] for s in read_rows(tmp_path / "r" / "steps.jsonl")] == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints" / "step_00000003").glob("*.distcp")) == \
        ["__0_0.distcp", "__1_0.distcp"]
