"""Build everything a run needs from its validated config, in one call (``build``; no
training here): the task, the starting checkpoint (built, warm-started and cached if
needed), the recipe of axis functions, the process group, the frozen ``RunPlan``, the
trainer (FSDP2-sharded when the run needs it, ``sharding.py``), the generator's policy,
the optimizer, the prompt stream, the road the weights take to the generators
(``weights.py``) and the async schedule (with its generator processes, if any).
docs/architecture.md, "A run's start, in order", follows it step by step."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from scalerl.core.heap import return_large_frees
from scalerl.generation.engines import GENERATORS, EngineContext, Generator, TorchGenerator
from scalerl.loggers import LOGGERS
from scalerl.loggers.base import Logger
from scalerl.models import MODELS
from scalerl.models.load import CheckpointUnits, build_empty, load_model, load_tokenizer
from scalerl.models.policy import CompletionLogits, Policy, checkpoint_layers
from scalerl.registry import async_node
from scalerl.tasks import TASKS
from scalerl.tasks.base import TaskData
from scalerl.train.compute import flop_params
from scalerl.train.distributed import init_distributed, launched_world
from scalerl.train.heldout import pin_heldout
from scalerl.train.progress import announce
from scalerl.train.optimizer import build_adamw
from scalerl.train.prompt_stream import PromptSampler
from scalerl.train.run_plan import RunPlan, plan_run, resolve
from scalerl.train.schedules import schedule_class
from scalerl.train.schedules.base import Schedule
from scalerl.train.schedules.pipeline import generator_pool, generators_dtype
from scalerl.train.sharding import needs_sharding, shard_trainer
from scalerl.train.warmstart import warm_start_checkpoint
from scalerl.train.weights import Copy, LoadWeights, Remote, Road, SharedModule


def build(cfg, run_dir: Path) -> tuple[RunPlan, Run, Schedule]:
    """Everything the run of the validated ``cfg`` in ``run_dir`` needs, in the order it needs it:
    the frozen plan (what the config decides, bound to this process), the live run and its
    schedule (which owns the road the weights take to the generators)."""
    if cfg.model.release_freed_memory:  # freed activations leave the trainer's RSS (core/heap.py)
        return_large_frees()
    device = pick_device(cfg.train.device)
    threads = resolve_threads(cfg.train.threads)
    announce(run_dir, "loading the model and the task")
    task, ckpt, tok = prepare_start(cfg)  # before the process group: HF writes on rank 0 only
    # Once: the plan, the run and the schedules share the recipe, the dtypes and the tokenizer. The
    # body dtype decides whether the trainer is sharded, so it comes before the process group.
    resolved = resolve(cfg, device, tok)
    nodes = async_node(cfg).generator_nodes  # SLURM node roles: those nodes run generators, not ranks
    dist = init_distributed(device, sharded=needs_sharding(launched_world(nodes), resolved.body_dtype),
                            generator_nodes=nodes)
    plan = plan_run(cfg, dist, resolved, threads=threads)
    r = build_run(plan, task, ckpt, logger=build_logger(cfg) if dist.main else None)
    pin_heldout(run_dir, r.task, write=dist.main)  # every arm and every resume: the same held-out prompts
    return plan, r, build_schedule(plan, r)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # train.device=cuda without a device is refused before the run starts (config.check_environment)
    return torch.device(name)


def resolve_threads(n: int) -> int:
    """0 = auto: SCALERL_NUM_THREADS (set by the local launcher), SLURM_CPUS_PER_TASK, or all cores."""
    if n <= 0:
        n = int(os.environ.get("SCALERL_NUM_THREADS") or os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)
    torch.set_num_threads(n)
    return n


@dataclass
class Run:
    """The live objects of a run; what its config decides is its ``RunPlan`` (``run_plan.py``)."""

    task: TaskData
    model: torch.nn.Module
    """The trainer's HF model (fp32 master weights; FSDP2-sharded when the plan is ``sharded``)."""
    trainer: CompletionLogits
    """The trainer's forward (the FSDP2 root when sharded) around ``model``."""
    policy: Policy
    """The generator's view: ``model`` itself, or its own copy in the compute dtype when sharded and
    sampled from in this process; sharded with an engine of its own or in generator processes, a
    weightless (meta-device) model that only carries the config for export."""
    generator: Generator
    """The in-process engine (``generation`` group): evaluation, and training batches unless
    generator processes make them (``async=pipeline_rl``)."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PromptSampler
    n_params: int
    params: list
    checkpoint: Path
    """The checkpoint the run started from (generators with their own weights load it too)."""
    logger: Optional[Logger] = None
    """The experiment logger (``logger`` group), on the main rank only (``build``)."""


def prepare_checkpoint(cfg, log=print) -> tuple[TaskData, Path]:
    """``prepare_start`` without the tokenizer."""
    task, ckpt, _ = prepare_start(cfg, log=log)
    return task, ckpt


def prepare_start(cfg, log=print) -> tuple[TaskData, Path, object]:
    """The task, the local checkpoint to load and its tokenizer: the model option's checkpoint,
    warm-started (and cached by a hash of what determines it) when
    ``model.warmstart.enabled``.

    Call this before joining a process group: HF's save_pretrained writes
    nothing on non-zero ranks, and the file locks already make one process
    build while the others wait.
    """
    base, tok, task = base_and_task(cfg, log=log)  # the run's one tokenizer load: a warm start keeps it
    if not cfg.model.warmstart.enabled:
        return task, base, tok
    # A task without answers to imitate is refused with the config (``task.imitable()``, config._cross_checks).
    # The default's warm start ships with the package (docs/embedded.md): every machine starts RL
    # from the same weights, and nothing trains SFT at run time. Other settings build and cache theirs.
    return task, warm_start_checkpoint(cfg, base, task, tok, Path(cfg.cache_dir).expanduser(), log=log), tok


def base_and_task(cfg, log=print) -> tuple[Path, object, TaskData]:
    """The model option's checkpoint (built and cached if needed), its tokenizer, and the task."""
    base = MODELS[cfg.model.name].fn(cfg.model, Path(cfg.cache_dir).expanduser(), log=log)
    tok = load_tokenizer(base)
    return base, tok, TASKS[cfg.task.name].fn(cfg.task, tokenizer=tok)  # prompts use its chat template


def build_logger(cfg) -> Logger:
    """The run's experiment logger (``logger`` group); only the main rank logs."""
    return LOGGERS[cfg.logger.name].fn(cfg.logger)


def build_run(plan: RunPlan, task: TaskData, ckpt: Path, *, logger: Optional[Logger] = None) -> Run:
    cfg, recipe, heads, dist = plan.cfg, plan.recipe, plan.heads, plan.dist
    device, sharded, body, attn = dist.device, plan.sharded, plan.body_dtype, plan.attn
    option = GENERATORS[cfg.generation.name]
    # An engine in the generator processes only (``plan.engine_in_generators``): the trainer keeps
    # the torch engine over its own model, which then only tracks the version.
    remote, copy = plan.engine_in_generators, plan.road.engine == "copy"
    if sharded:
        # fp32 master weights built on the meta device; each FSDP2 unit is read from the checkpoint
        # just before it is sharded (``CheckpointUnits``): no rank ever holds a full copy.
        model = build_empty(ckpt, dtype=torch.float32, attn_implementation=attn, lean=plan.lean)
    else:
        model = load_model(ckpt, dtype=body, device=device, attn_implementation=attn, lean=plan.lean)
    model.train()  # no dropout in the tiny model; real checkpoints set their own
    n_params = flop_params(model)
    if cfg.model.activation_checkpointing:  # before fully_shard: the composable checkpoint composes with it
        checkpoint_layers(model)
    # Length buckets change how many layer forwards a rank runs: one grid under FSDP2 (every rank must run as many).
    trainer = CompletionLogits(model, heads.train, head_chunk=cfg.train.head_chunk,
                               length_buckets=1 if sharded else cfg.train.length_buckets)
    trainer.route = recipe.route  # routing=replay: the generator's experts (models/routing.py)
    if sharded:
        head = torch.float32 if heads.train_dtype == torch.float32 else body
        units = CheckpointUnits(ckpt, model, dtype=torch.float32, device=torch.device("cpu"))
        # On the CPU: fully_shard moves each unit's shard to the device.
        shard_trainer(trainer, dist.mesh, compute_dtype=body, head_dtype=head, materialize=units.materialize)
        # A generator copy only where this process samples from it: not for an engine with weights of
        # its own (vLLM) or one in generator processes; they get weights pushed from ``model``.
        if copy:
            gen_model = load_model(ckpt, dtype=body, device=device, attn_implementation=attn, lean=plan.lean)
        else:
            gen_model = build_empty(ckpt, dtype=body, attn_implementation=attn, lean=plan.lean)  # the config, for export
        gen_model.eval()
        # An fp32 generator head keeps its own fp32 copy of the head weight (the body copy is in bf16).
        own_head = copy and heads.gen_dtype == torch.float32 and body != torch.float32
        head_weight = gen_model.get_output_embeddings().weight.detach().float().clone() if own_head else None
        policy = Policy(gen_model, gen_head=heads.gen, train_head=heads.train, head_weight=head_weight, lean=copy)
    else:
        policy = Policy(model, gen_head=heads.gen, train_head=heads.train)
    params = [p for p in trainer.parameters() if p.requires_grad]
    t = cfg.train
    # torch's foreach AdamW on CUDA; on a CPU the same ops a slice at a time (train/optimizer.py says why)
    optimizer = build_adamw(params, device, lr=t.lr, betas=t.betas, eps=t.adam_eps, weight_decay=t.weight_decay)
    # Constant lr after a linear warm-up (arXiv 2510.13786 §2; the warm-up's length: TrainConfig.warmup_steps).
    warm = max(t.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    sampler = PromptSampler(len(task.train), cfg.seed, recipe.retire_at)
    ctx = EngineContext(policy=policy, checkpoint=Path(ckpt), device=device, body_dtype=body,
                        head_dtype=heads.gen_dtype, seed=cfg.seed)
    generator = TorchGenerator(policy, device) if remote else option.fn(ctx, cfg=cfg.generation)
    return Run(task=task, model=model, trainer=trainer, policy=policy, generator=generator, optimizer=optimizer,
               scheduler=scheduler, sampler=sampler, n_params=n_params, params=params, checkpoint=Path(ckpt),
               logger=logger)


def build_schedule(plan: RunPlan, r: Run) -> Schedule:
    """The schedule the ``async`` option names (``plan.schedule``), with the road its weights take."""
    return schedule_class(plan.schedule)(plan, r, build_road(plan, r))


def build_road(plan: RunPlan, r: Run) -> Road:
    """The plan's road (``plan.road``: ``run_plan.road_kind``, the one table) over the live run: the
    in-process engine's end, then the training batches' end, if they have their own."""
    batches = {None: lambda: None, "own_sampler": lambda: LoadWeights(r.model, own_sampler(plan, r)),
               "remote": lambda: remote_end(plan, r)}[plan.road.batches]()
    return Road(engine_end(plan, r), batches, plan.interleaving.push_every)


def engine_end(plan: RunPlan, r: Run):
    """The in-process engine's end of the road (``RoadKind.engine``)."""
    return {"shared": lambda: SharedModule(r.generator), "version": lambda: SharedModule(r.generator),
            "copy": lambda: Copy(r.model, r.policy, r.generator),
            "load_weights": lambda: LoadWeights(r.model, r.generator)}[plan.road.engine]()


def own_sampler(plan: RunPlan, r: Run) -> TorchGenerator:
    """The training batches' torch engine with weights of its own, when the precision axis gives the
    generator a body dtype other than the trainer's, or rounds its weights to one (``engine``: bf16
    weights, computed in the trainer's dtype)."""
    gen_dtype = plan.heads.gen_body_dtype or plan.body_dtype
    rounds = plan.heads.gen_round_dtype not in (None, gen_dtype)
    model = load_model(r.checkpoint, dtype=gen_dtype, device=plan.dist.device, attn_implementation=plan.attn,
                       lean=plan.lean)
    model.eval()
    return TorchGenerator(Policy(model, gen_head=plan.heads.gen, train_head=plan.heads.gen), plan.dist.device,
                          round_to=plan.heads.gen_round_dtype if rounds else None)


def remote_end(plan: RunPlan, r: Run) -> Remote:
    """The generator processes (not started yet; rank 0's pool, None elsewhere) and the push to them.
    The run's threads are shared: each generator takes ``async.generator_threads`` (0: an equal
    share), the trainer the rest."""
    mode = plan.interleaving
    gen_threads = mode.generator_threads or max(1, plan.threads // (1 + mode.generators))
    torch.set_num_threads(max(1, plan.threads - mode.generators * gen_threads))
    dtype = generators_dtype(plan)
    return Remote(generator_pool(plan, r, gen_threads=gen_threads, dtype=dtype), r.model, dtype, plan.sharded)
