"""Build everything a run needs from its validated config (no training here):
the task, the starting checkpoint (built, warm-started and cached if needed),
the recipe of axis functions, the trainer (FSDP2-sharded when the run needs
it, ``sharding.py``), the generator's policy, the optimizer, the prompt stream
and the async schedule (with its generator processes, if any)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from scalerl.core.errors import ConfigError
from scalerl.generation.engines import GENERATORS, EngineContext, Generator, TorchGenerator
from scalerl.loggers import LOGGERS
from scalerl.loggers.base import Logger
from scalerl.models import MODELS
from scalerl.models.load import CheckpointUnits, build_empty, load_model, load_tokenizer
from scalerl.models.policy import CompletionLogits, Policy, checkpoint_layers
from scalerl.tasks import TASKS
from scalerl.tasks.base import TaskData
from scalerl.train.compute import flop_params
from scalerl.train.pipeline import PipelineSchedule
from scalerl.train.prompt_stream import PromptSampler
from scalerl.train.run_plan import RunPlan
from scalerl.train.schedule import LocalSchedule, Schedule
from scalerl.train.sharding import copy_weights, shard_trainer
from scalerl.train.warmstart import warm_start_checkpoint
from scalerl.train.weights import trainer_state_dict


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
    sharded: bool
    """``model`` is FSDP2-sharded (its parameters are shards): the plan's ``sharded``."""
    checkpoint: Path
    """The checkpoint the run started from (generators with their own weights load it too)."""
    shares_policy: bool = True
    """The generator samples from ``policy`` itself (the torch engine), not from weights of its own."""
    engine_in_generators: bool = False
    """The run's engine lives in the generator processes only (``async=pipeline_rl`` with an engine
    that loads its own weights, e.g. vLLM): they sample evaluations too; ``generator`` only keeps
    the trainer's version."""
    policy_is_copy: bool = False
    """``policy`` holds its own copy of the weights (sharded, sampled in-process), refreshed by a push."""

    def sync_generator(self, version: int) -> None:
        """After an update (or a resume): the in-process generator samples from the trainer's
        current weights, as ``version``. The torch engine on the trainer's own model copies
        nothing; on its own copy (sharded) it gets a full-weight push; an engine with weights
        of its own (vLLM) gets them through ``load_weights``."""
        if not self.shares_policy:
            self.generator.load_weights(trainer_state_dict(self.model).items(), version)
            return
        if self.policy_is_copy:
            copy_weights(self.model, self.policy)
        self.generator.version = version


def prepare_checkpoint(cfg, log=print) -> tuple[TaskData, Path]:
    """The task and the local checkpoint to load: the model option's checkpoint,
    warm-started (and cached by a hash of what determines it) when
    ``model.warmstart.enabled``.

    Call this before joining a process group: HF's save_pretrained writes
    nothing on non-zero ranks, and the file locks already make one process
    build while the others wait.
    """
    base, tok, task = base_and_task(cfg, log=log)
    if not cfg.model.warmstart.enabled:
        return task, base
    if task.sft_stream is None:
        raise ConfigError("model.warmstart.enabled", f"task={cfg.task.name} has no answers to imitate in a supervised "
                                                     "warm start; set model.warmstart.enabled=false")
    # The default's warm start ships with the package (docs/embedded.md): every machine starts RL
    # from the same weights, and nothing trains SFT at run time. Other settings build and cache theirs.
    return task, warm_start_checkpoint(cfg, base, task, tok, Path(cfg.cache_dir).expanduser(), log=log)


def base_and_task(cfg, log=print) -> tuple[Path, object, TaskData]:
    """The model option's checkpoint (built and cached if needed), its tokenizer, and the task."""
    base = MODELS[cfg.model.name].fn(cfg.model, Path(cfg.cache_dir).expanduser(), log=log)
    tok = load_tokenizer(base)
    return base, tok, TASKS[cfg.task.name].fn(cfg.task, tokenizer=tok)  # prompts use its chat template


def build_logger(cfg) -> Logger:
    """The run's experiment logger (``logger`` group); only the main rank logs."""
    return LOGGERS[cfg.logger.name].fn(cfg.logger)


def build_run(plan: RunPlan, task: TaskData, ckpt: Path) -> Run:
    cfg, recipe, heads, dist = plan.cfg, plan.recipe, plan.heads, plan.dist
    device, sharded, body, attn = dist.device, plan.sharded, plan.body_dtype, plan.attn
    option = GENERATORS[cfg.generation.name]
    # With generator processes, an engine of its own (vLLM) runs only there, evaluation included
    # (``PipelineSchedule.eval_generator``): a second one here would double its start-up and memory.
    # The trainer keeps the torch sampler over its own model, which then only tracks the version.
    remote = plan.interleaving.generators > 0 and not option.schema.samples_policy
    if sharded:
        # fp32 master weights built on the meta device; each FSDP2 unit is read from the checkpoint
        # just before it is sharded (``CheckpointUnits``): no rank ever holds a full copy.
        model = build_empty(ckpt, dtype=torch.float32, attn_implementation=attn)
    else:
        model = load_model(ckpt, dtype=body, device=device, attn_implementation=attn)
    model.train()  # no dropout in the tiny model; real checkpoints set their own
    n_params = flop_params(model)
    if cfg.model.activation_checkpointing:  # before fully_shard: the composable checkpoint composes with it
        checkpoint_layers(model)
    trainer = CompletionLogits(model, heads.train, head_chunk=cfg.train.head_chunk)
    copy = False
    if sharded:
        head = torch.float32 if heads.train_dtype == torch.float32 else body
        units = CheckpointUnits(ckpt, model, dtype=torch.float32, device=torch.device("cpu"))
        # On the CPU: fully_shard moves each unit's shard to the device.
        shard_trainer(trainer, dist.mesh, compute_dtype=body, head_dtype=head, materialize=units.materialize)
        # A generator copy only where this process samples from it: not for an engine with weights of
        # its own (vLLM) or one in generator processes; they get weights pushed from ``model``.
        copy = option.schema.samples_policy and not remote
        if copy:
            gen_model = load_model(ckpt, dtype=body, device=device, attn_implementation=attn)
        else:
            gen_model = build_empty(ckpt, dtype=body, attn_implementation=attn)  # the config, for export
        gen_model.eval()
        # An fp32 generator head keeps its own fp32 copy of the head weight (the body copy is in bf16).
        own_head = copy and heads.gen_dtype == torch.float32 and body != torch.float32
        head_weight = gen_model.get_output_embeddings().weight.detach().float().clone() if own_head else None
        policy = Policy(gen_model, gen_head=heads.gen, train_head=heads.train, head_weight=head_weight, lean=copy)
    else:
        policy = Policy(model, gen_head=heads.gen, train_head=heads.train)
    params = [p for p in trainer.parameters() if p.requires_grad]
    t = cfg.train
    # foreach: one op over all (sharded) tensors; torch's default would step them one by one on CPU. Not
    # fused, though faster still: its rounding differs from foreach's, and 1 and 2 ranks must sample
    # the same tokens (tests/test_distributed.py), which needs bit-identical weights.
    optimizer = torch.optim.AdamW(params, lr=t.lr, betas=tuple(t.betas), eps=t.adam_eps, weight_decay=t.weight_decay,
                                  foreach=True)
    # Constant lr after a linear warm-up (arXiv 2510.13786 §2: 100 warm-up steps, then constant).
    warm = max(t.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    sampler = PromptSampler(len(task.train), cfg.seed, recipe.retire_at)
    ctx = EngineContext(policy=policy, checkpoint=Path(ckpt), device=device, body_dtype=body,
                        head_dtype=heads.gen_dtype, seed=cfg.seed)
    generator = TorchGenerator(policy, device) if remote else option.fn(ctx, cfg=cfg.generation)
    return Run(task=task, model=model, trainer=trainer, policy=policy, generator=generator, optimizer=optimizer,
               scheduler=scheduler, sampler=sampler, n_params=n_params, params=params, sharded=sharded,
               checkpoint=Path(ckpt),
               shares_policy=getattr(generator, "policy", None) is policy, engine_in_generators=remote,
               policy_is_copy=copy)


def own_generator(plan: RunPlan, r: Run) -> Optional[TorchGenerator]:
    """An in-process generator with its own copy of the weights when the precision axis gives the
    generator a body dtype other than the trainer's, or rounds its weights to one (``engine``: bf16
    weights, computed in the trainer's dtype); None: it shares the trainer's module, or the run's
    engine has weights of its own (vLLM)."""
    gen_dtype = plan.heads.gen_body_dtype or plan.body_dtype
    rounds = plan.heads.gen_round_dtype not in (None, gen_dtype)
    if not r.shares_policy or (gen_dtype == plan.body_dtype and not rounds):
        return None
    model = load_model(r.checkpoint, dtype=gen_dtype, device=plan.dist.device, attn_implementation=plan.attn)
    model.eval()
    return TorchGenerator(Policy(model, gen_head=plan.heads.gen, train_head=plan.heads.gen), plan.dist.device,
                          round_to=plan.heads.gen_round_dtype if rounds else None)


def build_schedule(plan: RunPlan, r: Run) -> Schedule:
    """The schedule for the plan's ``async`` mode. With generator processes, the run's threads are
    shared: each generator takes ``async.generator_threads`` (0: an equal share), the trainer the rest."""
    mode = plan.interleaving
    if mode.generators == 0:
        return LocalSchedule(plan, r, own_generator=own_generator(plan, r))
    gen_threads = mode.generator_threads or max(1, plan.threads // (1 + mode.generators))
    torch.set_num_threads(max(1, plan.threads - mode.generators * gen_threads))
    return PipelineSchedule(plan, r, gen_threads=gen_threads)
