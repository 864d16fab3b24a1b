"""``LocalSchedule``: the trainer's own process generates (``sync`` and ``ppo_off_policy`` with
``async.generators=0``; arXiv 2510.13786 §3.1).

``sync`` generates each batch just before its step, exactly as before the async axis
existed; ``ppo_off_policy`` generates the k batches of a phase with one version, then
trains on them one per step. Batches generated ahead are saved in checkpoints, so a
resume is exact.
"""
from __future__ import annotations

import time

from scalerl.asynchrony.base import within_lag
from scalerl.generation import Generator
from scalerl.train.rollout import Rollout, rollout, rollout_from_state, rollout_state
from scalerl.train.schedules.base import Batch, batch_stats
from scalerl.train.weights import LoadWeights, Road


class LocalSchedule:
    """The trainer's own process generates (sync, ppo_off_policy: ``async.generators=0``)."""

    generator_devices = 0
    pids: list[int] = []
    eval_on_main = False  # every rank samples its share in-process

    def __init__(self, plan, r, road: Road):
        """``plan``: the ``RunPlan``; ``r``: the live ``Run``; ``road``: how the weights reach what
        samples (``setup.build_road``). The training batches come from the road's ``batches`` end
        when it has one (a sampler with a body dtype of its own, ``run_plan.road_kind``), else from
        the in-process engine ``r.generator``."""
        self.plan, self.r, self.cfg, self.mode = plan, r, plan.cfg, plan.interleaving
        self.road = road
        self.gen_kw = plan.sampling.kw(r.generator if road.batches is None else road.batches.generator)
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
        t0 = time.perf_counter()
        depth = len(self.pending)  # batches ready when this step's is asked for
        if step not in self.pending:  # a new phase: the current version generates every batch the lag bound allows
            for b in range(step, min(self.cfg.train.steps, step + self.mode.max_lag) + 1):
                self.generate(b)
            if isinstance(self.road.batches, LoadWeights):
                # A sampler with weights of its own (``precision.generator_body``) idles until the push
                # that opens the next phase (every push_every = max_lag + 1 versions) overwrites them all:
                # it does not hold its copy (fp32 on a CPU: 2 GB at 0.5B) through the update's peak.
                self.road.batches.release()
        return self.consume(step, t0, depth)

    def generate(self, step: int) -> None:
        """Sample ``step``'s batch with the current weights and keep it until that step asks for it."""
        r, cfg, recipe = self.r, self.cfg, self.plan.recipe
        prompts = r.sampler.next(cfg.batch.prompts)  # identical on every rank
        ro = rollout(prompts, self.plan.rank_groups, r.task, group=cfg.batch.generations, seed=cfg.seed, step=step,
                     draw_lengths=recipe.draw_lengths, trains_on=recipe.trains_on,
                     refill_rounds=recipe.refill_rounds, sampler=r.sampler, **self.gen_kw)
        self.pending[step] = (ro, prompts, r.sampler.drawn)

    def consume(self, step: int, t0: float, depth: int) -> Batch:
        """Hand over ``step``'s kept batch with its metrics: ``t0``, when the step asked for it;
        ``depth``, the batches that were ready then."""
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
