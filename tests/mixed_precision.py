"""The mixed-precision checks, shared by the GPU tests (``tests/gpu``, bf16 on CUDA) and their CPU
twins (``tests/test_mixed_precision.py``, bf16 on the CPU under gloo), so the GPU tests' code runs
in every suite and cannot drift from the API it calls (it did once: a renamed argument went
unnoticed until a GPU ran them).

A step: one rollout from the in-process generator, then one update with random advantages (a
random model earns no reward), then the weight push to the generator."""
from __future__ import annotations

import math

import torch

from scalerl.models.policy import token_logprobs
from scalerl.train.distributed import init_distributed, shutdown
from scalerl.train.rollout import rollout
from scalerl.train.run_plan import plan_run, resolve
from scalerl.train.setup import build_run, engine_end, prepare_start
from scalerl.train.sharded_checkpoint import resume, save_sharded
from scalerl.train.sharding import full_state_dict
from scalerl.train.update import policy_update


def sample(plan, r, dist, *, prompts: int, group: int, seed: int = 0):
    """One rollout from the in-process generator."""
    return rollout(list(range(prompts)), slice(0, prompts), r.task, group=group, seed=seed, step=1,
                   draw_lengths=plan.recipe.draw_lengths, trains_on=plan.recipe.trains_on, refill_rounds=0, sampler=r.sampler,
                   generator=r.generator, tok=plan.sampling.tok, max_new_tokens=plan.sampling.max_new_tokens, temperature=1.0,
                   device=dist.device)


def rl_step(plan, r, dist, *, prompts: int, group: int, seed: int = 0, version: int = 1):
    """One rollout, one update with random advantages, and the push of the new weights."""
    ro = sample(plan, r, dist, prompts=prompts, group=group, seed=seed)
    adv = torch.randn(prompts, group, generator=torch.Generator().manual_seed(seed))
    upd = policy_update(r.trainer, r.optimizer, r.params, ro, adv, torch.ones(prompts, dtype=torch.bool), plan.recipe,
                        minibatches=2, grad_clip=1.0, temperature=1.0, rank_groups=slice(0, prompts), dist=dist)
    engine_end(plan, r).publish(version)  # the in-process engine's road, as the schedule takes it
    return ro, upd


def check_bf16_step(cfg, device: torch.device, *, label: str, max_mean_dlogp: float) -> float:
    """A sharded run with a bf16 body and an fp32 head: fp32 master weights that one step moves,
    the push reaching the generator's bf16 copy, and sampler log-probs close to the trainer's on
    the pushed weights. Returns the mean |dlogp|."""
    from torch.distributed.tensor import DTensor

    task, ckpt, tok = prepare_start(cfg)
    dist = init_distributed(device, sharded=True)
    try:
        plan = plan_run(cfg, dist, resolve(cfg, device, tok))
        r = build_run(plan, task, ckpt)
        assert all(isinstance(p, DTensor) and p.dtype == torch.float32 and p.device.type == device.type
                   for p in r.params)  # the master weights
        assert next(r.policy.model.parameters()).dtype == torch.bfloat16  # the generator's copy
        assert r.policy.head_weight.dtype == torch.float32  # its own fp32 head
        before = full_state_dict(r.model)
        ro, upd = rl_step(plan, r, dist, prompts=8, group=8)
        assert ro.gen.tokens.device.type == device.type and ro.gen.logprobs.dtype == torch.float32
        assert upd["nonfinite"] == 0 and math.isfinite(upd["loss"]) and upd["grad_norm"] > 0
        after = full_state_dict(r.model)
        moved = torch.stack([(after[k] - before[k]).abs().max() for k in before]).max()
        assert 0 < moved < 1e-2  # one AdamW step at lr 1.5e-4, in fp32
        gen = r.policy.model.state_dict()
        assert all(torch.equal(gen[k], after[k].to(gen[k].dtype)) for k in gen)  # pushed to the generator
        # Sampler against trainer on the pushed weights (bf16 bodies, fp32 heads). Sampled only: an
        # update in between would measure the policy's change instead (a random-advantage step
        # moves a random model's log-probs by 0.07 to 0.8 per token).
        ro2 = sample(plan, r, dist, prompts=8, group=8, seed=1)
        with torch.no_grad():
            logits = r.trainer(ro2.prompt_ids, ro2.prompt_mask, ro2.gen.tokens, ro2.gen.present.long(), 8)
        dlogp = (token_logprobs(logits, ro2.gen.tokens) - ro2.gen.logprobs)[ro2.gen.sampled].abs()
        print(f"{label}: mean |dlogp| {dlogp.mean():.2e}, max {dlogp.max():.2e}")
        assert 0 < dlogp.mean() < max_mean_dlogp  # 0 would mean the generator ran the trainer's fp32 kernels
        return float(dlogp.mean())
    finally:
        shutdown(dist)


def check_sharded_round_trip(cfg, device: torch.device, tmp_path) -> None:
    """Save a sharded checkpoint after one step, resume it into a fresh run: equal weights and
    AdamW moments, and the same next step."""
    task, ckpt, tok = prepare_start(cfg)
    dist = init_distributed(device, sharded=True)
    try:
        plan = plan_run(cfg, dist, resolve(cfg, device, tok))
        r = build_run(plan, task, ckpt)
        rl_step(plan, r, dist, prompts=4, group=4)
        extra = {"scheduler": r.scheduler.state_dict(), "sampler": r.sampler.state_dict(), "state": {"step": 1}}
        save_sharded(tmp_path, 1, r.model, r.optimizer, extra, dist=dist)
        r2 = build_run(plan, task, ckpt)
        assert resume(tmp_path, r2)["state"] == {"step": 1}
        engine_end(plan, r2).publish(1)  # as the schedule's start does after a resume
        a, b = full_state_dict(r.model), full_state_dict(r2.model)
        assert all(torch.equal(a[k], b[k]) for k in a)
        sa, sb = r.optimizer.state_dict()["state"], r2.optimizer.state_dict()["state"]
        assert sa.keys() == sb.keys() and sa
        for i in sa:
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(sa[i][k].to_local(), sb[i][k].to_local())
        # ...and the resumed trainer takes the same next step.
        _, u1 = rl_step(plan, r, dist, prompts=4, group=4, seed=5, version=2)
        _, u2 = rl_step(plan, r2, dist, prompts=4, group=4, seed=5, version=2)
        assert math.isclose(u1["loss"], u2["loss"], rel_tol=1e-5)
    finally:
        shutdown(dist)
