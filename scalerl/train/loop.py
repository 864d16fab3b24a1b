"""The RL training loop: one function, read top to bottom.

Per step (synchronous; PipelineRL asynchrony is a separate axis to come):
  rollout    sample G completions for each of the step's prompts, recording
             per-token behaviour log-probs, and score them with the task reward
  filter     keep mask over prompt groups (``recipe.keep``), NPR bookkeeping
  advantages group-centred, scaled by ``recipe.advantages``
  update     per-token loss (``recipe.loss``), reduced by ``recipe.aggregate``,
             an AdamW step per minibatch
  account    FLOPs, device-hours and tokens: the x-axis (see ``compute.py``)
  eval       every ``eval_every`` steps: held-out pass rate -> metrics.jsonl,
             then an atomic checkpoint, so metrics and checkpoints never diverge

Deviations from the paper's setup (arXiv 2510.13786 §2), on purpose:
- no asynchrony yet (PipelineRL-8 is the ScaleRL choice);
- eval every ``eval_every`` steps instead of every 100 (tiny runs are short);
- rewards are {0, 1}, not ±1 (advantage normalization makes them equivalent
  except under ``adv_norm=none``).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from scalerl.config.derive import derive
from scalerl.core.jsonio import JsonlFile
from scalerl.train.checkpoint import load_latest, save_checkpoint
from scalerl.train.compute import gen_flops, train_flops
from scalerl.train.distributed import init_distributed, shutdown
from scalerl.train.evaluate import heldout_pass_rate
from scalerl.train.progress import Progress
from scalerl.train.rollout import encode_phrase, rollout
from scalerl.train.setup import build_logger, build_run, pick_device, prepare_checkpoint, resolve_threads
from scalerl.train.signals import StopRequest
from scalerl.train.update import policy_update


def train(cfg, run_dir: Path, *, run_name: str, group: str, config_dict: dict) -> dict:
    """Run, or resume, one RL run in ``run_dir``. Returns final counters and status."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stop = StopRequest(run_dir).install()
    # ------------------------------------------------------------------ setup
    device = pick_device(cfg.train.device)
    threads = resolve_threads(cfg.train.threads)
    task, ckpt_path = prepare_checkpoint(cfg)
    dist = init_distributed(device.type)
    say = print if dist.main else (lambda *a, **k: None)
    r = build_run(cfg, task, ckpt_path, device)
    derived = derive(cfg, dist.world, len(encode_phrase(r.tok, getattr(cfg.length, "phrase", ""))))
    G, per_rank = cfg.batch.generations, derived.prompts_per_rank
    mine = slice(dist.rank * per_rank, (dist.rank + 1) * per_rank)
    devices = cfg.train.gpus or dist.world  # device-hours = wall x devices
    gen_kw = dict(generator=r.generator, tok=r.tok, plan_lengths=r.recipe.plan_lengths,
                  max_new_tokens=cfg.length.max_new_tokens, temperature=cfg.train.temperature, device=device)
    metrics, steps_log = JsonlFile(run_dir / "metrics.jsonl"), JsonlFile(run_dir / "steps.jsonl")
    state = {"step": 0, "compute": 0.0, "device_hours": 0.0, "tokens": 0, "wall_s": 0.0,
             "nan_skips": 0, "nan_streak": 0, "truncation_alarms": 0, "wandb_id": None,
             "window": []}  # per-step stats since the last eval, averaged into its row
    # ----------------------------------------------------------------- resume
    ckpt = load_latest(run_dir, log=say)
    if ckpt is not None:
        r.model.load_state_dict(ckpt["model"])
        r.optimizer.load_state_dict(ckpt["optimizer"])
        r.scheduler.load_state_dict(ckpt["scheduler"])
        r.sampler.load_state_dict(ckpt["sampler"])
        state.update(ckpt["state"])
        say(f"[scalerl] resuming {run_name} from step {state['step']}")
    if dist.main:  # rows written after the checkpoint will be re-done, exactly
        metrics.truncate_after(state["step"] if ckpt is not None else -1)
        steps_log.truncate_after(state["step"] if ckpt is not None else -1)
    logger = build_logger(cfg) if dist.main else None
    if logger is not None:
        state["wandb_id"] = logger.start(run_dir, run_name, group, config_dict, state["wandb_id"])
        (run_dir / "derived.json").write_text(_json(derived.to_dict() | {"n_params": r.n_params, "threads": threads}))
    progress = Progress(run_dir, run_name, cfg.train.steps, state["step"], enabled=dist.main)
    r.generator.version = state["step"]
    window: list[dict] = state["window"]  # checkpointed: a resume mid-interval averages the same steps

    def evaluate_and_checkpoint() -> None:
        r.model.eval()
        ev = heldout_pass_rate(r.task, samples=cfg.train.eval_samples, seed=cfg.seed, step=state["step"],
                               dist=dist, **gen_kw)
        r.model.train()
        row = {"step": state["step"], "compute": state["compute"], "device_hours": state["device_hours"],
               "tokens": state["tokens"], "epoch": r.sampler.epochs_done, **ev, **_mean(window),
               "retired": len(r.sampler.retired), "nan_skips": state["nan_skips"], "wall_s": state["wall_s"]}
        window.clear()
        if dist.main:
            metrics.append(row)
            logger.log({f"eval/{k}" if k.startswith("pass_rate") else k: v for k, v in row.items()}, state["step"])
            save_checkpoint(run_dir, state["step"], _payload(r, state), cfg.train.keep_checkpoints, r.model)
        progress.update(state["step"], pass_rate=ev["pass_rate"])
        dist.barrier()

    # ------------------------------------------------------------ step-0 eval
    if state["step"] == 0:
        evaluate_and_checkpoint()  # R0 of the fit: the policy before any RL
    while state["step"] < cfg.train.steps and not _stop_agreed(stop, dist):
        t0 = time.perf_counter()
        step = state["step"] + 1
        rng = torch.Generator().manual_seed(_seed(cfg.seed, dist.rank, step))
        # -------------------------------------------------------------- rollout
        step_prompts = r.sampler.next(cfg.batch.prompts)  # identical on every rank
        ro = rollout(step_prompts[mine], r.task, group=G, keep_fn=r.recipe.keep, refill_rounds=r.recipe.refill_rounds,
                     sampler=r.sampler, rng=rng, **gen_kw)
        rewards, correct = dist.all_cat(ro.rewards), dist.all_cat(ro.correct)  # (P, G) whole batch
        # ------------------------------------------------ filter + advantages
        keep = r.recipe.keep(rewards)  # (P,)
        adv = r.recipe.advantages(rewards, keep)  # (P, G)
        prompt_index = ro.prompt_index if dist.world == 1 else step_prompts
        r.sampler.record(prompt_index, correct.mean(-1))  # NPR history (no-op threshold unless enabled)
        # --------------------------------------------------------------- update
        upd = policy_update(r.policy, r.optimizer, r.params, ro, adv[mine], keep[mine], r.recipe,
                            minibatches=cfg.batch.minibatches, grad_clip=cfg.train.grad_clip, dist=dist)
        r.scheduler.step()
        r.generator.version = step
        # -------------------------------------------------------------- account
        counts = dist.all_sum(torch.tensor([float(ro.gen_tokens), float(upd["train_tokens"]),
                                            float(ro.gen.present.sum()), float(ro.gen.truncated.sum()),
                                            float(ro.gen.interrupted.sum()), float(ro.gen.truncated.numel())]))
        gen_tok, train_tok, new_tok, n_trunc, n_interrupt, n_samples = counts.tolist()
        wall = time.perf_counter() - t0
        step_flops = gen_flops(r.n_params, gen_tok) + train_flops(r.n_params, train_tok)
        state.update(step=step, compute=state["compute"] + step_flops, tokens=state["tokens"] + int(new_tok),
                     wall_s=state["wall_s"] + wall, device_hours=state["device_hours"] + wall * devices / 3600)
        stats = {"train_reward": correct.mean().item(), "response_length": new_tok / n_samples,
                 "truncation_rate": n_trunc / n_samples, "interrupt_rate": n_interrupt / n_samples,
                 "effective_batch": int(keep.sum()), "tokens_per_s": new_tok / wall, "step_time_s": wall,
                 "lr": r.scheduler.get_last_lr()[0], **{k: v for k, v in upd.items() if k != "train_tokens"}}
        _alarms(stats, state, cfg, say, dist)
        window.append(stats)
        if dist.main:
            steps_log.append({"step": step, "compute": state["compute"], **stats})
            logger.log({f"train/{k}": v for k, v in stats.items()}, step)
        # -------------------------------------------------- eval + checkpoint
        if step % cfg.train.eval_every == 0 or step == cfg.train.steps:
            evaluate_and_checkpoint()
        elif step % cfg.train.ckpt_every == 0 and dist.main:
            save_checkpoint(run_dir, step, _payload(r, state), cfg.train.keep_checkpoints, r.model)
        progress.update(step)
    # ----------------------------------------------------------------- finish
    status = "done" if state["step"] >= cfg.train.steps else (
        "preempted" if stop.preempted else "stopped_early" if stop.early else "interrupted")
    if status != "done" and dist.main:  # stopped by a signal: save exactly where we are
        save_checkpoint(run_dir, state["step"], _payload(r, state), cfg.train.keep_checkpoints, r.model)
    progress.update(state["step"], status=status)
    progress.close()
    if logger is not None:
        logger.finish()
    shutdown(dist)
    if status == "preempted":
        stop.hand_over()  # under submitit: requeue this job, which resumes from the checkpoint
    stop.restore()
    return {"status": status, **{k: v for k, v in state.items() if k not in ("nan_streak", "window")}}


def _alarms(stats: dict, state: dict, cfg, say, dist) -> None:
    """NaN/Inf losses and truncation rate: the paper's instability signals."""
    if stats["nonfinite"]:
        state["nan_skips"] += 1
        state["nan_streak"] += 1
        say(f"[scalerl] ALARM step {state['step']}: non-finite loss/gradient in {stats['nonfinite']} "
            f"minibatch(es); update skipped ({state['nan_streak']} in a row)")
        if state["nan_streak"] >= cfg.train.max_nan_skips:
            raise FloatingPointError(f"non-finite loss for {state['nan_streak']} consecutive steps "
                                     f"(train.max_nan_skips={cfg.train.max_nan_skips}); the last checkpoint is clean")
    else:
        state["nan_streak"] = 0
    if stats["truncation_rate"] > cfg.length.alarm:
        state["truncation_alarms"] += 1
        say(f"[scalerl] ALARM step {state['step']}: truncation rate {stats['truncation_rate']:.1%} > "
            f"length.alarm={cfg.length.alarm:.0%} (arXiv 2510.13786 §3.2: 10-15% destabilized training)")
    stats["alarm_truncation"] = int(stats["truncation_rate"] > cfg.length.alarm)


def _stop_agreed(stop: StopRequest, dist) -> bool:
    """All ranks stop at the same step if any of them was signalled."""
    return dist.all_sum(torch.tensor([float(stop.requested)])).item() > 0


def _payload(r, state: dict) -> dict:
    return {"model": r.model.state_dict(), "optimizer": r.optimizer.state_dict(), "scheduler": r.scheduler.state_dict(),
            "sampler": r.sampler.state_dict(), "state": dict(state)}


def _seed(seed: int, rank: int, step: int) -> int:
    """Per-(seed, rank, step) sampling seed: resumes are exact without saving RNG state."""
    return (seed * 1_000_003 + rank * 7_919 + step) % (2**63 - 1)


def _mean(rows: list[dict]) -> dict:
    keys = {k for row in rows for k in row}
    return {k: sum(row[k] for row in rows if k in row) / sum(1 for row in rows if k in row) for k in sorted(keys)}


def _json(obj) -> str:
    return json.dumps(obj, indent=2, default=str)
