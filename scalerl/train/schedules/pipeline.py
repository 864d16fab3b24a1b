"""``PipelineSchedule``: generator processes with their own weights stream
beside the trainer (``async.generators >= 1``; PipelineRL, arXiv 2510.13786 §3.1).

The trainer keeps the orders ``lookahead + 1`` steps ahead (``ordered_through``:
at most ``max_lag + 1``): it draws each step's prompts, its length limits and its
sampling seed, and sends them as one order split across the generators
(contiguous prompt shards). A generator starts a step's shard only with weights
no older than the lag bound allows, so no consumed token is ever more than
``max_lag`` versions stale; the trainer checks it again on every batch
(``within_lag``). With a short lookahead the generators never run far ahead of
the trainer: a push lands while they generate, and a batch's staleness comes
from completions that span updates, the paper's mechanism (docs/async.md).
After each optimizer step the trainer first queues the next order, then pushes
its weights, so a generator that has a push has the orders it allows.

Each step's seeds and length limits are the ones the in-process rollout draws
(``rollout.prompt_seeds``, ``rollout.length_rng``), and a completion depends only on
its prompt's seed, so ``max_lag=0`` reproduces the in-process ``sync`` run bit for
bit with any number of generators: the transport and the pushes lose nothing.

Checkpoints: batches in flight are regenerated after a resume, not saved;
their prompts are drawn again from the sampler state of the checkpoint's step,
and the tokens they had cost are not counted (like a step cut short). The
generators resume from the checkpoint's weights, so the first batches after a
resume are fresher than they would have been.

Several trainer ranks (torchrun, srun): rank 0 alone owns the generator pool. It
orders, collects and scores every step's batch, then hands each rank its share,
the groups the in-process schedule would have it generate (``scatter_batch``), so
the loop's all-gathers, advantages and groups trained on are those of the sync run. Every
rank draws the same prompts from its own sampler (the snapshots a checkpoint
saves are the same on every rank) and joins each weight gather (collective when
the trainer is sharded); only rank 0 sends the weights on. DAPO refills are
refused with several ranks (``config.check_ranks``): rank 0 would draw the refill
prompts alone.
"""
from __future__ import annotations

import time
from dataclasses import replace

import torch

from scalerl.asynchrony.base import Interleaving, within_lag
from scalerl.generation.engines import Generation, SamplingParams, cat_generations
from scalerl.generation.fleet import GeneratorPool, Shard, WorkerSpec, job_rendezvous
from scalerl.registry import async_node
from scalerl.train.rollout import (
    Rollout,
    make_request,
    length_rng,
    prompt_seeds,
    refill,
    rollout_from_state,
    rollout_share,
    rollout_state,
    score,
)
from scalerl.train.distributed import Dist
from scalerl.train.schedules.base import Batch, batch_stats
from scalerl.train.weights import Road


def generator_device(trainer: torch.device, j: int) -> str:
    """Generator j's device: CPU with a CPU trainer; else the GPUs after the trainer's, wrapping
    around (with too few GPUs, generators share them). Counted within the process's visible GPUs,
    so in a local sweep a generator stays inside its arm's share (launch/gpus.py). Run on one GPU,
    which the generator shares (benchmarks/gpu_check.sh); several GPUs are untested."""
    if trainer.type != "cuda":
        return "cpu"
    first = trainer.index if trainer.index is not None else torch.cuda.current_device()
    return f"cuda:{(first + 1 + j) % torch.cuda.device_count()}"


def split(n_items: int, parts: int) -> list[slice]:
    """Contiguous, near-equal slices (the first ones one longer)."""
    size, extra = divmod(n_items, parts)
    out, at = [], 0
    for j in range(parts):
        k = size + (j < extra)
        out.append(slice(at, at + k))
        at += k
    return out


def scatter_batch(whole: tuple[Batch, dict] | None, per_rank: int, dist: Dist) -> tuple[Batch, dict]:
    """Rank 0's scored batch (``whole``: the batch and its stats; None on the other ranks) handed
    out over the default process group: rank k gets groups ``[k * per_rank, (k + 1) * per_rank)``,
    the share ``LocalSchedule`` gives it, with the whole step's prompts and rank 0's batch stats.
    The shares travel in the wire format (``Dist.scatter_data``), copied to the CPU, each with its
    own groups only; under NCCL they are staged through the rank's GPU (untested: one GPU here)."""
    send = None
    if whole is not None:
        batch, stats = whole
        send = []
        for k in range(dist.world):
            groups = slice(k * per_rank, (k + 1) * per_rank)
            state = _cpu_copy(rollout_state(rollout_share(batch.rollout, groups)))
            send.append((state, batch.fresh[groups].clone(), list(batch.prompts), stats))
    state, fresh, prompts, stats = dist.scatter_data(send)
    return Batch(rollout_from_state(state, dist.device), list(prompts), fresh), stats


def _cpu_copy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, dict):
        return {k: _cpu_copy(v) for k, v in x.items()}
    return x


def generators_dtype(plan) -> str:
    """The generator processes' body dtype: the precision axis's generator body, else the trainer's."""
    return str(plan.heads.gen_body_dtype or plan.body_dtype).removeprefix("torch.")


def generator_pool(plan, r, *, gen_threads: int, dtype: str) -> GeneratorPool | None:
    """The generator processes (not started yet), owned by rank 0 alone; None on the other ranks.
    ``gen_threads``: each generator's CPU threads; ``dtype``: their body dtype."""
    if not plan.dist.main:
        return None
    mode, cfg, device = plan.interleaving, plan.cfg, plan.dist.device
    spec = WorkerSpec(
        rank=0, n_generators=mode.generators, checkpoint=str(r.checkpoint), device="cpu", dtype=dtype,
        compute_dtype=str(plan.compute_dtype).removeprefix("torch."), heads=plan.recipe.heads,
        attn_implementation=plan.attn, threads=gen_threads,
        timeout_s=mode.timeout_s, in_flight=mode.in_flight, schema=(),
        generation=cfg.generation.name, generation_cfg=cfg.generation, seed=cfg.seed, lean=plan.lean)
    # The push schema needs shapes only (no gather). Generators the trainer does not start: an
    # operator's (external_generators), then the job's generator nodes' (launch/roles.py), the last ones.
    node = async_node(cfg)
    return GeneratorPool(spec, mode.generators, r.model.state_dict(),
                         devices=[generator_device(device, j) for j in range(mode.generators)],
                         external=node.external_generators + node.generator_nodes,
                         rendezvous=job_rendezvous() if node.generator_nodes else None, device=device)


class PipelineSchedule:
    def __init__(self, plan, r, road: Road):
        """``plan``: the ``RunPlan``; ``r``: the live ``Run``; ``road``: how the weights reach the
        in-process engine and the generators (``setup.build_road``), whose ``Remote`` end holds the
        generator processes (``pool``: rank 0's; None elsewhere). With an engine that loads its own
        weights (e.g. vLLM) the run's engine lives in the generator processes only
        (``plan.engine_in_generators``), which then sample the evaluations too, and
        ``r.generator`` only tracks the trainer's version."""
        self.plan, self.r, self.cfg, self.mode = plan, r, plan.cfg, plan.interleaving
        self.road, self.pool, self.evaluate_in_generators = road, road.batches.pool, plan.engine_in_generators
        self.device, self.tok = plan.dist.device, plan.sampling.tok
        self.generator_devices = self.mode.generators
        self.dist = plan.dist  # the loop's: scatter_batch hands the shares out over its default group
        self.main, self.world = plan.dist.main, plan.dist.world
        self.per_rank = plan.derived.prompts_per_rank
        self.requests: dict = {}  # job -> Request (what scoring its completions needs)
        self.jobs: dict[int, int] = {}  # step -> the job of its batch
        self.next_job = 1
        self.snapshots: dict[int, dict] = {}  # sampler state right after drawing each dispatched step
        self.dispatched = 0
        self.clocks = [(0.0, 0.0)] * self.mode.generators  # per generator: (idle + push s, elapsed s) at its last shard
        self.last: dict = {}
        self.wait_s = self.push_s = 0.0

    @property
    def pids(self) -> list[int]:
        return self.pool.pids if self.main else []

    @property
    def eval_on_main(self) -> bool:
        """Evaluation is sampled by the generator processes (``eval_generator``), which only rank 0
        talks to: with several ranks, rank 0 evaluates the whole held-out split alone."""
        return self.world > 1 and self.evaluate_in_generators

    # --------------------------------------------------------------- stream
    def start(self, version: int) -> None:
        self.snapshots[version] = self.r.sampler.state_dict()
        self.dispatched = version
        if self.main:
            self.pool.start()
        self._dispatch(version)
        self.push_s = self.road.start(version)  # the in-process engine, then the generators (weights.py)

    def _dispatch(self, version: int) -> None:
        """Order every step the lag bound lets the generators start from ``version`` on."""
        r, cfg = self.r, self.cfg
        for s in range(self.dispatched + 1, ordered_through(self.mode, version, cfg.train.steps) + 1):
            index = r.sampler.next(cfg.batch.prompts)
            self.snapshots[s] = r.sampler.state_dict()  # every rank draws: the same sampler everywhere
            if self.main:
                self.jobs[s] = self._order(s, index, 0)
            self.dispatched = s

    def _order(self, step: int, index: list[int], round_: int) -> int:
        """Order ``index``'s groups for ``step`` (refill round ``round_``), split across the generators."""
        cfg, G, P = self.cfg, self.cfg.batch.generations, len(index)
        lengths = self.plan.recipe.draw_lengths(P * G, length_rng(cfg.seed, step, round_))
        sampling = self.plan.sampling
        req = make_request([self.r.task.train[i] for i in index], index, G, seeds=prompt_seeds(cfg.seed, step, round_, P),
                           limits=lengths, tok=sampling.tok, max_new_tokens=sampling.max_new_tokens,
                           temperature=sampling.temperature)
        job, self.next_job = self.next_job, self.next_job + 1
        self.requests[job] = req
        self.pool.order(job, step, self.mode.min_version(step), self._shards(req.prompts, req.params))
        return job

    def _shards(self, prompts, params: SamplingParams) -> list[Shard]:
        """Contiguous prompt shards, one per generator, each with its rows' settings and seeds."""
        shards, at, G = [], params.interrupt_at, params.n
        seeds = params.seeds if params.seeds is not None else torch.arange(len(prompts), dtype=torch.long)
        for part in split(len(prompts), self.mode.generators):
            rows = slice(part.start * G, part.stop * G)
            shards.append(Shard(prompts[part], replace(params, interrupt_at=None if at is None else at[rows],
                                                       seeds=seeds[part])))
        return shards

    @property
    def eval_generator(self):
        """The trainer's in-process engine; or the generator processes, when the run's engine lives
        only there (``evaluate_in_generators``, e.g. vLLM): evaluations are then sampled by the
        same engine as the training batches."""
        return _Generators(self) if self.evaluate_in_generators else self.r.generator

    def generate_now(self, prompts, params: SamplingParams) -> Generation:
        """``prompts`` sampled by the generator processes with the trainer's current weights: ordered as
        the current step, so they go before every order of a later step, once this version has arrived."""
        version = self.r.generator.version
        job, self.next_job = self.next_job, self.next_job + 1
        self.pool.order(job, version, version, self._shards(list(prompts), params))
        parts = self.pool.collect(job, version)
        return cat_generations([g for g, _ in parts], self.tok.pad_token_id).to(self.device)

    def _receive(self, job: int, step: int) -> tuple[Rollout, list[tuple[Generation, dict]]]:
        parts = self.pool.collect(job, step)
        gen = cat_generations([g for g, _ in parts], self.tok.pad_token_id).to(self.device)
        ro = score(self.requests.pop(job), gen, self.cfg.batch.generations, tok=self.tok, task=self.r.task,
                   device=self.device)
        return ro, parts

    def rollout(self, step: int) -> Batch:
        t0 = time.perf_counter()
        whole = self._collect(step) if self.main else None
        if self.world > 1:  # each rank its share; rank 0's stats everywhere
            batch, self.last = scatter_batch(whole, self.per_rank, self.dist)
        else:
            batch, self.last = whole
        for s in [s for s in self.snapshots if s < step]:
            del self.snapshots[s]
        self.wait_s = time.perf_counter() - t0
        return batch

    def _collect(self, step: int) -> tuple[Batch, dict]:
        """Rank 0: the step's whole batch from the generators, scored and refilled, with its stats."""
        r, G = self.r, self.cfg.batch.generations
        depth = sum(self.pool.ready(self.jobs[s]) for s in range(step, self.dispatched + 1))
        ro, parts = self._receive(self.jobs.pop(step), step)
        clocks = [h for _, h in parts]

        def draw(round_: int, k: int) -> Rollout:  # DAPO dynamic sampling: k fresh groups from the generators
            nonlocal clocks
            fresh, parts = self._receive(self._order(step, r.sampler.next(k), round_), step)
            clocks = [h for _, h in parts]
            if self.dispatched == step:  # no later step drawn yet: the refill's prompts belong to this step
                self.snapshots[step] = r.sampler.state_dict()
            return fresh

        ro = refill(ro, self.plan.recipe.refill_rounds, self.plan.recipe.trains_on, draw)  # one rank only (check_ranks)
        fresh = within_lag(ro.gen.version, ro.gen.present, step - 1, G, max_lag=self.mode.max_lag).cpu()
        idle = []
        for j, h in enumerate(clocks):
            idle_before, t_before = self.clocks[j]
            idle.append((h["idle_s"] - idle_before) / max(h["elapsed_s"] - t_before, 1e-9))
            self.clocks[j] = (h["idle_s"], h["elapsed_s"])
        stats = {**batch_stats(ro, fresh, step - 1), "queue_depth": depth,
                 "generator_idle_frac": sum(idle) / len(idle)}
        return Batch(ro, ro.prompt_index, fresh), stats

    def publish(self, step: int) -> None:
        self._dispatch(step)  # orders before the push: a generator that has the push has the orders
        self.push_s = self.road.publish(step)

    def stats(self, wall: float) -> dict:
        return {**self.last, "trainer_idle_frac": min(self.wait_s / wall, 1.0) if wall > 0 else 0.0,
                "push_time_s": self.push_s}

    # ----------------------------------------------------------- checkpoint
    def sampler_state(self, step: int) -> dict:
        """The sampler as it was right after drawing ``step``'s prompts (the orders beyond are
        regenerated after a resume), with the retirements recorded since."""
        return {**self.snapshots[step], "retired": sorted(self.r.sampler.retired)}

    def epochs_done(self, step: int) -> float:
        return self.snapshots[step]["drawn"] / self.r.sampler.n

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def ordered_through(mode: Interleaving, version: int, steps: int) -> int:
    """The last step whose batch may be ordered once the trainer holds ``version``: the lag bound,
    tightened by ``lookahead``, and never past the run's ``steps``.

    >>> ordered_through(Interleaving(max_lag=8, push_every=1, in_flight=True, generators=1, lookahead=1), 5, 100)
    7
    >>> ordered_through(Interleaving(max_lag=2, push_every=1, in_flight=True, generators=1), 5, 7)
    7
    """
    ahead = mode.max_lag if mode.lookahead < 0 else min(mode.lookahead, mode.max_lag)
    return min(steps, version + 1 + ahead)


class _Generators:
    """The generator processes as a ``Generator`` that samples at the trainer's version (evaluation)."""

    def __init__(self, sched: PipelineSchedule):
        self.sched = sched

    @property
    def version(self) -> int:
        return self.sched.r.generator.version

    def generate(self, prompts, params: SamplingParams, *, between_steps=None) -> Generation:
        return self.sched.generate_now(prompts, params)

    def load_weights(self, named_tensors, version: int) -> None:
        raise TypeError("the generator processes get their weights from PipelineSchedule.publish")

    def close(self) -> None:
        pass

