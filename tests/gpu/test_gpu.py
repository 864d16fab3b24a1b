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

from scalerl.config import compose, validate
from scalerl.models.policy import token_logprobs
from scalerl.train.distributed import init_distributed, shutdown
from scalerl.train.loop import train
from scalerl.train.rollout import rollout
from scalerl.train.setup import build_run, prepare_checkpoint
from scalerl.train.sharded_checkpoint import resume, save_sharded
from scalerl.train.sharding import full_state_dict
from scalerl.train.update import policy_update

CUDA = ["logger=none", "train.device=cuda", "model.warmstart.enabled=false", "train.eval_samples=1"]


def cfg_of(*overrides: str):
    return validate(compose([*CUDA, *overrides]))


def rl_step(cfg, r, dist, *, prompts: int, group: int, seed: int = 0):
    """One rollout and one update with random advantages (a random model earns no reward)."""
    mine = slice(0, prompts)
    ro = rollout(list(range(prompts)), mine, r.task, group=group, seed=seed, step=1,
                 plan_lengths=r.recipe.plan_lengths, keep_fn=r.recipe.keep, refill_rounds=0, sampler=r.sampler,
                 generator=r.generator, tok=r.tok, max_new_tokens=cfg.length.max_new_tokens, temperature=1.0,
                 device=dist.device)
    adv = torch.randn(prompts, group, generator=torch.Generator().manual_seed(seed))
    upd = policy_update(r.trainer, r.optimizer, r.params, ro, adv, torch.ones(prompts, dtype=torch.bool), r.recipe,
                        minibatches=2, grad_clip=1.0, temperature=1.0, mine=mine, dist=dist)
    r.sync_generator()
    return ro, upd


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
    task, ckpt = prepare_checkpoint(cfg)
    dist = init_distributed(torch.device("cuda"), sharded=True)
    try:
        r = build_run(cfg, task, ckpt, dist)
        from torch.distributed.tensor import DTensor

        assert all(isinstance(p, DTensor) and p.dtype == torch.float32 and p.is_cuda for p in r.params)  # master
        assert next(r.policy.model.parameters()).dtype == torch.bfloat16  # the generator's copy
        assert r.policy.head_weight.dtype == torch.float32  # its own fp32 head (embeddings are tied)
        before = full_state_dict(r.model)
        ro, upd = rl_step(cfg, r, dist, prompts=8, group=8)
        assert ro.gen.tokens.is_cuda and ro.gen.logprobs.dtype == torch.float32
        assert upd["nonfinite"] == 0 and math.isfinite(upd["loss"]) and upd["grad_norm"] > 0
        after = full_state_dict(r.model)
        moved = torch.stack([(after[k] - before[k]).abs().max() for k in before]).max()
        assert 0 < moved < 1e-2  # one AdamW step at lr 1.5e-4, in fp32
        gen = r.policy.model.state_dict()
        assert all(torch.equal(gen[k], after[k].to(gen[k].dtype)) for k in gen)  # pushed to the generator
        # Sampler log-probs against trainer log-probs: the same weights, bf16 bodies, fp32 heads.
        ro2, _ = rl_step(cfg, r, dist, prompts=8, group=8, seed=1)
        with torch.no_grad():
            logits = r.trainer(ro2.prompt_ids, ro2.prompt_mask, ro2.gen.tokens, ro2.gen.present.long(), 8)
        dlogp = (token_logprobs(logits, ro2.gen.tokens) - ro2.gen.logprobs)[ro2.gen.sampled].abs()
        print(f"0.5B bf16 body, fp32 head: mean |dlogp| {dlogp.mean():.2e}, max {dlogp.max():.2e}")
        assert dlogp.mean() < 0.05
    finally:
        shutdown(dist)


def test_sharded_checkpoint_round_trip_on_cuda(tmp_path):
    cfg = cfg_of("batch.prompts=4", "batch.generations=4")
    task, ckpt = prepare_checkpoint(cfg)
    dist = init_distributed(torch.device("cuda"), sharded=True)
    try:
        r = build_run(cfg, task, ckpt, dist)
        rl_step(cfg, r, dist, prompts=4, group=4)
        extra = {"scheduler": r.scheduler.state_dict(), "sampler": r.sampler.state_dict(), "state": {"step": 1}}
        save_sharded(tmp_path, 1, r.model, r.optimizer, extra, keep=2, dist=dist)
        r2 = build_run(cfg, task, ckpt, dist)
        assert resume(tmp_path, r2)["state"] == {"step": 1}
        r2.sync_generator()  # as the loop does after a resume
        a, b = full_state_dict(r.model), full_state_dict(r2.model)
        assert all(torch.equal(a[k], b[k]) for k in a)
        sa, sb = r.optimizer.state_dict()["state"], r2.optimizer.state_dict()["state"]
        assert sa.keys() == sb.keys()
        for i in sa:
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(sa[i][k].to_local(), sb[i][k].to_local())
        # ...and the resumed trainer takes the same next step.
        _, u1 = rl_step(cfg, r, dist, prompts=4, group=4, seed=5)
        _, u2 = rl_step(cfg, r2, dist, prompts=4, group=4, seed=5)
        assert u1["loss"] == pytest.approx(u2["loss"], rel=1e-5)
    finally:
        shutdown(dist)


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
