"""Carrying out the run's interleaving: which weights generate which step's batch.

The loop asks its schedule for each step's batch (``rollout``), trains on it,
then hands the new weights over (``publish``). Two schedules carry out every
``async`` option (arXiv 2510.13786 §3.1):

- ``LocalSchedule`` (``async.generators=0``): the trainer's process generates.
  ``sync`` generates each batch just before its step, exactly as before the
  async axis existed; ``ppo_off_policy`` generates the k batches of a phase
  with one version, then trains on them one per step. Batches generated ahead
  are saved in checkpoints, so a resume is exact.
- ``PipelineSchedule`` (``pipeline.py``, ``async.generators >= 1``):
  generator processes with their own weights stream within the lag bound.

Both report, per step: the staleness of the consumed tokens, the fraction of
completions spanning several versions, the queue depth, the idle fractions of
the generator and trainer sides and the weight-push time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

from scalerl.asynchrony.base import version_stats, within_lag
from scalerl.generation import Generator
from scalerl.train.rollout import Rollout, rollout, rollout_from_state, rollout_state
from scalerl.train.weights import Road


@dataclass
class Batch:
    rollout: Rollout
    """This rank's share of the step's batch."""
    prompts: list[int]
    """The whole step's prompt indices (identical on every rank)."""
    fresh: torch.Tensor
    """(P_rank,) bool on the CPU, like the rewards: groups within the lag bound (a group that is not
    is dropped, see ``within_lag``)."""


class Schedule(Protocol):
    generator_devices: int
    """Devices the generators use besides the trainer's (device-hours count them)."""
    pids: list[int]
    """The generator processes (none in the trainer's process)."""
    eval_generator: Generator
    """What samples the held-out evaluation, at the trainer's current version."""
    eval_on_main: bool
    """Only rank 0 can sample with ``eval_generator``: it evaluates the whole split alone."""

    def start(self, version: int) -> None: ...

    def rollout(self, step: int) -> Batch: ...

    def publish(self, step: int) -> None:
        """The trainer now holds version ``step``: hand it to the generators along the run's road
        (``weights.Road``), as the interleaving says."""

    def stats(self, wall: float) -> dict:
        """This step's async metrics, given its wall time."""

    def sampler_state(self, step: int) -> dict:
        """The prompt sampler's state to checkpoint at ``step``."""

    def epochs_done(self, step: int) -> float: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None: ...


def batch_stats(ro: Rollout, fresh: torch.Tensor, trainer_version: int) -> dict:
    """Staleness, multi-version completions and lag-bound drops of one consumed batch."""
    return {**version_stats(ro.gen.version, ro.gen.present, trainer_version), "lag_dropped": int((~fresh).sum())}


class LocalSchedule:
    """``async.generators=0``: the trainer's own process generates (sync, ppo_off_policy)."""

    generator_devices = 0
    pids: list[int] = []
    eval_on_main = False  # every rank samples its share in-process

    def __init__(self, plan, r, road: Road, *, batch_generator: Optional[Generator] = None):
        """``plan``: the ``RunPlan``; ``r``: the live ``Run``; ``road``: how the weights reach the
        generators (``setup.build``); ``batch_generator``: the sampler with a body dtype of its own
        that generates the training batches (``setup.own_generator``), else None (``r.generator``)."""
        self.plan, self.r, self.cfg, self.mode = plan, r, plan.cfg, plan.interleaving
        self.road = road
        self.gen_kw = plan.sampling.kw(r.generator if batch_generator is None else batch_generator)
        self.pending: dict[int, tuple[Rollout, list[int], int]] = {}  # step -> (rollout, prompts, sampler.drawn)
        self.drawn_at: dict[int, int] = {}
        self.gen_s = self.push_s = 0.0
        self.last: dict = {}

    @property
    def eval_generator(self) -> Generator:
        return self.r.generator  # the trainer's weights, in its dtype

    def start(self, version: int) -> None:
        self.road.start(version)

    def rollout(self, step: int) -> Batch:
        r, cfg = self.r, self.cfg
        t0 = time.perf_counter()
        depth = len(self.pending)  # batches ready when this step's is asked for
        if step not in self.pending:  # a new phase: the current version generates every batch the lag bound allows
            for b in range(step, min(cfg.train.steps, step + self.mode.max_lag) + 1):
                prompts = r.sampler.next(cfg.batch.prompts)  # identical on every rank
                recipe = self.plan.recipe
                ro = rollout(prompts, self.plan.mine, r.task, group=cfg.batch.generations, seed=cfg.seed, step=b,
                             draw_lengths=recipe.draw_lengths, keep_fn=recipe.keep,
                             refill_rounds=recipe.refill_rounds, sampler=r.sampler, **self.gen_kw)
                self.pending[b] = (ro, prompts, r.sampler.drawn)
        ro, prompts, drawn = self.pending.pop(step)
        self.drawn_at = {step: drawn}
        self.gen_s = time.perf_counter() - t0
        fresh = within_lag(ro.gen.version, ro.gen.present, step - 1, ro.correct.shape[1],
                           max_lag=self.mode.max_lag).cpu()
        self.last = {**batch_stats(ro, fresh, step - 1), "queue_depth": depth}
        return Batch(ro, prompts, fresh)

    def publish(self, step: int) -> None:
        self.push_s = self.road.publish(step)

    def stats(self, wall: float) -> dict:
        # One device alternates: idle as a generator while it trains, idle as a trainer while it generates.
        busy_gen = min(self.gen_s / wall, 1.0) if wall > 0 else 0.0
        return {**self.last, "trainer_idle_frac": busy_gen, "generator_idle_frac": 1.0 - busy_gen,
                "push_time_s": self.push_s}

    def sampler_state(self, step: int) -> dict:
        return self.r.sampler.state_dict()  # the batches drawn ahead are saved with it (state_dict)

    def epochs_done(self, step: int) -> float:
        return self.drawn_at.get(step, self.r.sampler.drawn) / self.r.sampler.n

    def state_dict(self) -> dict:
        return {"pending": {step: {"rollout": rollout_state(ro), "prompts": prompts, "drawn": drawn}
                            for step, (ro, prompts, drawn) in self.pending.items()}}

    def load_state_dict(self, state: dict) -> None:
        device = self.plan.sampling.device  # checkpoints load onto the CPU; the run may be on a GPU
        self.pending = {step: (rollout_from_state(p["rollout"], device), p["prompts"], p["drawn"])
                        for step, p in state.get("pending", {}).items()}

    def close(self) -> None:
        pass
