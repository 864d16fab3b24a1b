"""The RL training loop: one function, read top to bottom.

Per step:
  rollout    the step's batch from the run's schedule (``async`` axis): G scored
             completions per prompt with per-token behaviour log-probs and policy
             versions, generated just now (sync), earlier in the phase
             (ppo_off_policy) or streamed by generator processes (pipeline_rl)
  filter     the prompt groups trained on (``recipe.trains_on``), NPR bookkeeping
  advantages group-centred, scaled by ``recipe.advantages``
  update     per-token loss (``recipe.loss``), reduced by ``recipe.aggregate``,
             an AdamW step per minibatch
  publish    hand the new weights to the generators along the run's road, chosen once
             at set-up (``weights.py``): the in-process engine now (the torch engine on
             the trainer's own module: only the version moves), generators elsewhere
             as the interleaving says
  account    FLOPs, device-hours and tokens: the x-axis (see ``compute.py``)
  eval       at the steps of ``eval_steps`` (evenly spaced in log steps, or every ``eval_every``):
             held-out pass rate -> metrics.jsonl,
             then an atomic checkpoint, so metrics and checkpoints never diverge

Ranks (torchrun or srun) each generate for their share of the step's prompts
(pipeline_rl: rank 0's generator processes generate the batch and each rank gets
its share, ``pipeline.py``) and train through the FSDP2-sharded trainer (``sharding.py``); sampling is
keyed by prompt, not rank, so N ranks reproduce the 1-rank run.

Deviations from the paper's setup (arXiv 2510.13786 §2), on purpose:
- evals spread evenly in log steps (the fit's axis is log compute) instead of every 100 steps;
- rewards default to {0, 1} (``task.correct_reward``/``task.wrong_reward``), not ±1.
  Group-centred advantages cancel the offset, and batch or prompt std
  normalization cancels the scale, but ``adv_norm=none`` sees advantages half
  the size of the paper's (set ``task.wrong_reward=-1``). The overlong penalty
  works in units of half the reward gap, so its weight matches the paper's
  on either scale.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from scalerl.config.eval_schedule import eval_steps
from scalerl.core.jsonio import JsonlFile, write_json_atomic
from scalerl.loggers.base import namespaced
from scalerl.train.behaviour import LaggedWeights
from scalerl.train.checkpoint import check_finite, save_checkpoint
from scalerl.train.compute import gen_flops, train_flops
from scalerl.train.distributed import Dist, shutdown
from scalerl.train.evaluate import heldout_pass_rate
from scalerl.train.export import export_policy
from scalerl.train.loop_state import LoopState
from scalerl.train.progress import Progress, announce
from scalerl.train.setup import build
from scalerl.train.sharded_checkpoint import prune, resume, save_sharded
from scalerl.train.signals import StopRequest
from scalerl.train.update import policy_update


def train(cfg, run_dir: Path, *, run_name: str, group: str, config_dict: dict) -> dict:
    """Run, or resume, one RL run in ``run_dir``. Returns final counters and status."""
    stop = StopRequest(Path(run_dir)).install()
    try:
        return _train(cfg, Path(run_dir), stop, run_name=run_name, group=group, config_dict=config_dict)
    finally:  # an error too gives the process its signal handlers back
        stop.restore()


def _train(cfg, run_dir: Path, stop: StopRequest, *, run_name: str, group: str, config_dict: dict) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    # ------------------------------------------------------------------ setup
    plan, run, sched = build(cfg, run_dir)  # the frozen plan, the live run, the schedule and its weights' road
    recipe, dist, derived, rank_groups, threads = plan.recipe, plan.dist, plan.derived, plan.rank_groups, plan.threads
    say = print if dist.main else (lambda *a, **k: None)
    devices = (cfg.train.gpus or dist.world) + sched.generator_devices  # device-hours = wall x (trainer + generators)
    metrics, steps_log = JsonlFile(run_dir / "metrics.jsonl"), JsonlFile(run_dir / "steps.jsonl")
    state = LoopState()
    # ----------------------------------------------------------------- resume
    saved = resume(run_dir, run, log=say)  # either kind of checkpoint, from any number of ranks
    if saved is not None:
        sched.load_state_dict(saved.get("async", {}))
        state = LoopState.from_dict(saved["state"])
        say(f"[scalerl] resuming {run_name} from step {state.step}")
    if dist.main:  # rows written after the checkpoint will be re-done, exactly
        metrics.truncate_after(state.step if saved is not None else -1)
        steps_log.truncate_after(state.step if saved is not None else -1)
    logger = run.logger  # the main rank's; None on the others
    if logger is not None:
        state.wandb_id = logger.start(run_dir, run_name, group, config_dict, state.wandb_id)
    static = derived.to_dict() | {"n_params": run.n_params, "threads": threads, "trainer_threads": torch.get_num_threads(),
                                  "generator_devices": sched.generator_devices,
                                  # the GPUs this arm was given (launch/gpus.py), None where nothing set them
                                  "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                  "flops_per_train_token": train_flops(run.n_params, 1),
                                  "flops_per_gen_token": gen_flops(run.n_params, 1)}
    if dist.main:
        _write_derived(run_dir, static, state)
    progress = Progress(run_dir, run_name, cfg.train.steps, state.step, enabled=dist.main)
    window: list[dict] = state.window  # checkpointed: a resume mid-interval averages the same steps
    t = cfg.train
    eval_at = set(eval_steps(t.steps, every=t.eval_every, points=t.eval_points, first=t.eval_first))

    def evaluate_and_checkpoint() -> None:
        check_finite(run.model, dist)  # a diverged policy gets no eval row, only an error
        run.model.eval()
        t_eval = time.perf_counter()
        ev = _heldout(plan, run, sched, state.step)
        ev["eval_s"] = time.perf_counter() - t_eval  # what an eval costs: the cost estimate's calibration
        run.model.train()
        row = {"step": state.step, "compute": state.compute, "device_hours": state.device_hours,
               "tokens": state.tokens, "epoch": sched.epochs_done(state.step), **ev, **_mean(window),
               "retired": len(run.sampler.retired), "nan_skips": state.nan_skips, "wall_s": state.wall_s}
        window.clear()
        if dist.main:
            metrics.append(row)
            logger.log(namespaced("eval", row), state.step)
            _write_derived(run_dir, static, state)
        _save(run_dir, plan, run, state, sched, config_dict.get("run_identity"))
        progress.update(state.step, pass_rate=ev["pass_rate"])
        dist.barrier()

    if plan.interleaving.generators:
        announce(run_dir, f"starting {plan.interleaving.generators} generator process(es)", main=dist.main)
    sched.start(state.step)  # every generator gets the resumed weights, or the start's as version 0
    # The mismatch one version back (docs/mismatch.md): one rank, unsharded only, and only where a
    # batch can be of an older version (max_lag > 0): the copy is a full one of the weights
    # (fp32 on a CPU: 2 GB at 0.5B), and under a lag bound of 0 (sync) no group is ever sampled
    # one version back, so it would be kept and never read.
    one_rank = dist.world == 1 and dist.mesh is None
    stale = plan.interleaving.max_lag > 0
    lagged = LaggedWeights(run.params, t.mismatch_groups) if t.mismatch_groups and one_rank and stale else None
    progress.extra = {"generator_pids": sched.pids}
    try:
        # -------------------------------------------------------- step-0 eval
        if saved is None:  # a step-0 checkpoint is only ever written after the step-0 row: never evaluate twice
            announce(run_dir, f"evaluating the start on {len(run.task.heldout)} held-out prompts (step 0)", main=dist.main)
            evaluate_and_checkpoint()  # R0 of the fit: the policy before any RL
        stopping = _stop_agreed(stop, dist)
        while state.step < cfg.train.steps and not stopping:
            t0 = time.perf_counter()
            step = state.step + 1
            # ---------------------------------------------------------- rollout
            batch = sched.rollout(step)  # this rank's share of the step's batch
            ro = batch.rollout
            rewards, correct = dist.all_cat(torch.stack([ro.rewards, ro.correct], 1)).unbind(1)  # (P, G) whole batch
            # -------------------------------------------- filter + advantages
            trained = recipe.trains_on(rewards) & dist.all_cat(batch.fresh)  # (P,); fresh: within the lag bound
            adv = recipe.advantages(rewards, trained)  # (P, G)
            prompt_index = ro.prompt_index if dist.world == 1 else batch.prompts
            run.sampler.record(prompt_index, correct.mean(-1))  # NPR history (no-op threshold unless enabled)
            # ----------------------------------------------------------- update
            upd = policy_update(run.trainer, run.optimizer, run.params, ro, adv, trained, recipe,
                                minibatches=cfg.batch.minibatches, grad_clip=cfg.train.grad_clip,
                                temperature=cfg.train.temperature, rank_groups=rank_groups, dist=dist,
                                micro_batch_tokens=cfg.train.micro_batch_tokens, version=step - 1, lagged=lagged)
            run.scheduler.step()
            sched.publish(step)  # the generators get version `step` (now, or at the next phase)
            # ---------------------------------------------------------- account
            counts = dist.all_sum(torch.tensor([float(ro.gen_tokens), float(upd["train_tokens"]),
                                                float(ro.gen.present.sum()), float(ro.gen.truncated.sum()),
                                                float(ro.gen.interrupted.sum()), float(ro.gen.truncated.numel()),
                                                float(stop.requested)]))
            gen_tok, train_tok, new_tok, n_trunc, n_interrupt, n_samples, n_stop = counts.tolist()
            stopping = n_stop > 0  # all ranks stop at the same step if any of them was signalled
            wall = time.perf_counter() - t0
            step_flops = gen_flops(run.n_params, gen_tok) + train_flops(run.n_params, train_tok)
            if recipe.needs_old_logp:  # a correction's no-grad forward at the behaviour weights: 2N a token
                step_flops += gen_flops(run.n_params, train_tok)
            state.advance(step, step_flops, new_tok, wall, devices)
            stats = {"train_reward": correct.mean().item(), "response_length": new_tok / n_samples,
                     "truncation_rate": n_trunc / n_samples, "interrupt_rate": n_interrupt / n_samples,
                     "effective_batch": int(trained.sum()), "tokens_per_s": new_tok / wall, "step_time_s": wall,
                     "samples_per_s": n_samples / wall, "lr": run.scheduler.get_last_lr()[0],
                     **{k: v for k, v in upd.items() if k != "train_tokens"}, **sched.stats(wall)}
            _alarms(stats, state, cfg, say, dist)
            window.append(stats)
            if dist.main:
                steps_log.append({"step": step, "compute": state.compute, **stats})
                logger.log(namespaced("train", stats, {**state.axes(), "epoch": sched.epochs_done(step)}), step)
            # ---------------------------------------------- eval + checkpoint
            if step in eval_at:
                evaluate_and_checkpoint()
                stopping = stopping or _stop_agreed(stop, dist)  # early stopping decides on this eval: stop now
            elif step % cfg.train.ckpt_every == 0:
                _save(run_dir, plan, run, state, sched, config_dict.get("run_identity"))
            progress.update(step)
    finally:
        sched.close()  # generator processes stop (their in-flight batches are regenerated on resume)
        run.generator.close()  # an engine's processes (vLLM) go too, on an error as well
    # ----------------------------------------------------------------- finish
    status = "done" if state.step >= cfg.train.steps else (
        "preempted" if stop.preempted else "stopped_early" if stop.early else "interrupted")
    if status != "done":  # stopped by a signal or a stop request: save exactly where we are
        _save(run_dir, plan, run, state, sched, config_dict.get("run_identity"))
    elif cfg.train.export_policy:  # the final policy as an ordinary HF checkpoint directory
        export_policy(run_dir, run, dist, plan.sampling.tok)
    progress.update(state.step, status=status)
    progress.close()
    if logger is not None:
        logger.finish()
    shutdown(dist)
    if status == "preempted":
        stop.hand_over()  # under submitit: requeue this job, which resumes from the checkpoint
    stop.restore()
    return {"status": status, **state.result()}


def _alarms(stats: dict, state: LoopState, cfg, say, dist) -> None:
    """NaN/Inf losses and truncation rate: the paper's instability signals."""
    if stats["nonfinite"]:
        state.nan_skips += 1
        state.nan_streak += 1
        say(f"[scalerl] ALARM step {state.step}: non-finite loss/gradient in {stats['nonfinite']} "
            f"minibatch(es); update skipped ({state.nan_streak} in a row)")
        if state.nan_streak >= cfg.train.max_nan_skips:
            raise FloatingPointError(f"non-finite loss for {state.nan_streak} consecutive steps "
                                     f"(train.max_nan_skips={cfg.train.max_nan_skips}); the last checkpoint is clean")
    else:
        state.nan_streak = 0
    if stats["truncation_rate"] > cfg.length.alarm:
        state.truncation_alarms += 1
        say(f"[scalerl] ALARM step {state.step}: truncation rate {stats['truncation_rate']:.1%} > "
            f"length.alarm={cfg.length.alarm:.0%} (arXiv 2510.13786 §3.2: 10-15% destabilized training)")
    stats["alarm_truncation"] = int(stats["truncation_rate"] > cfg.length.alarm)


def _heldout(plan, run, sched, step: int) -> dict:
    """The held-out pass rate, sampled by ``sched.eval_generator``: every rank its share, or, when
    only rank 0 can reach that engine (``sched.eval_on_main``: vLLM in the generator processes
    of a several-rank run), rank 0 all of it, its row then handed to every rank."""
    dist = plan.dist
    kw = dict(samples=plan.cfg.train.eval_samples, seed=plan.cfg.seed, step=step, draw_lengths=plan.recipe.draw_lengths,
              **plan.sampling.kw(sched.eval_generator))
    if not sched.eval_on_main:
        return heldout_pass_rate(run.task, dist=dist, **kw)
    return dist.from_main(heldout_pass_rate(run.task, dist=Dist(device=dist.device), **kw) if dist.main else None)


def _stop_agreed(stop: StopRequest, dist) -> bool:
    """All ranks stop at the same step if any of them was signalled."""
    return dist.all_sum(torch.tensor([float(stop.requested)])).item() > 0


def _save(run_dir: Path, plan, run, state: LoopState, sched, run_identity: str | None) -> None:
    """Checkpoint: sharded (DCP, every rank) or one .pt file (rank 0). It records its run's
    identity (``rundir.run_identity``: the config hash less the horizon; its step is in ``state``), so a
    checkpoint of another run is refused on resume."""
    cfg, dist = plan.cfg, plan.dist
    extra = {"scheduler": run.scheduler.state_dict(), "sampler": sched.sampler_state(state.step), "state": state.to_dict(),
             "run_identity": run_identity}
    if plan.sharded:
        if sched.state_dict().get("pending"):
            # Batches generated ahead (ppo_off_policy) are tensors, which a sharded checkpoint's
            # JSON extra state cannot hold: such a run checkpoints at its phase boundaries only,
            # and a resume redoes the steps since the last one, exactly (docs/async.md).
            return
        save_sharded(run_dir, state.step, run.model, run.optimizer, extra, dist)
    elif dist.main:
        payload = {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(), **extra,
                   "async": sched.state_dict()}
        save_checkpoint(run_dir, state.step, payload, run.model)
    if dist.main:
        prune(run_dir, cfg.train.keep_checkpoints)  # either kind: sharded ones may be from an earlier N-rank phase


def _mean(rows: list[dict]) -> dict:
    """Per-step stats averaged over the eval interval (``*_max`` keys: their maximum)."""
    keys = {k for row in rows for k in row}
    return {k: max(row[k] for row in rows if k in row) if k.endswith("_max") else
            sum(row[k] for row in rows if k in row) / sum(1 for row in rows if k in row) for k in sorted(keys)}


def _write_derived(run_dir: Path, static: dict, state: LoopState) -> None:
    """``derived.json``: the config's derived quantities plus the measured FLOPs per step (mean
    so far; ``compute = steps x flops_per_step`` turns a step budget into compute)."""
    step = state.step
    write_json_atomic(run_dir / "derived.json", static | {"flops_per_step": state.compute / step if step else None,
                                                          "flops_per_step_over_steps": step})
