"""Build everything a run needs from its validated config (no training here):
the task, the starting checkpoint (built, warm-started and cached if needed),
the recipe of axis functions, the policy, the optimizer and the prompt stream."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from scalerl.core.errors import ConfigError
from scalerl.core.hashing import stable_hash
from scalerl.generation import GENERATORS, Generator
from scalerl.generation.base import EngineContext
from scalerl.loggers import LOGGERS
from scalerl.loggers.base import Logger
from scalerl.models import MODELS
from scalerl.models.load import compute_dtype, load_checkpoint
from scalerl.models.policy import Policy
from scalerl.registry import Recipe, build_recipe
from scalerl.tasks import TASKS
from scalerl.tasks.base import TaskData
from scalerl.train.compute import flop_params
from scalerl.train.sampler import PromptSampler
from scalerl.train.warmstart import cached_warm_start


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device", "cuda was requested but no GPU is visible; use train.device=auto or cpu")
    return torch.device(name)


def resolve_threads(n: int) -> int:
    """0 = auto: SCALERL_NUM_THREADS (set by the local launcher), SLURM_CPUS_PER_TASK, or all cores."""
    if n <= 0:
        n = int(os.environ.get("SCALERL_NUM_THREADS") or os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)
    torch.set_num_threads(n)
    return n


@dataclass
class Run:
    task: TaskData
    recipe: Recipe
    tok: object
    model: torch.nn.Module
    policy: Policy
    generator: Generator
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PromptSampler
    n_params: int
    params: list


def prepare_checkpoint(cfg, log=print) -> tuple[TaskData, Path]:
    """The task and the local checkpoint to load: the model option's checkpoint,
    warm-started (and cached by a hash of what determines it) when
    ``model.warmstart.enabled``.

    Call this before joining a process group: HF's save_pretrained writes
    nothing on non-zero ranks, and the file locks already make one process
    build while the others wait.
    """
    task = TASKS[cfg.task.name].fn(cfg.task)
    cache = Path(cfg.cache_dir).expanduser()
    base = MODELS[cfg.model.name].fn(cfg.model, cache, log=log)
    if not cfg.model.warmstart.enabled:
        return task, base
    key = {"base": str(base.resolve()), "warmstart": asdict(cfg.model.warmstart), "task": asdict(cfg.task)}
    return task, cached_warm_start(base, cache / f"warm-{stable_hash(key)}", cfg.model.warmstart, task, log=log)


def build_logger(cfg) -> Logger:
    """The run's experiment logger (``logger`` group); only the main rank logs."""
    return LOGGERS[cfg.logger.name].fn(cfg.logger)


def build_run(cfg, task: TaskData, ckpt: Path, device: torch.device) -> Run:
    recipe = build_recipe(cfg)
    dtype = compute_dtype(cfg.model.dtype, device)
    heads = recipe.heads(dtype)
    body_dtype = heads.body_dtype or dtype
    model, tok = load_checkpoint(ckpt, dtype=body_dtype, device=device,
                                 attn_implementation=cfg.model.attn_implementation)
    model.train()  # no dropout in the tiny model; real checkpoints set their own
    policy = Policy(model, gen_head=heads.gen, train_head=heads.train, temperature=cfg.train.temperature)
    params = [p for p in model.parameters() if p.requires_grad]
    t = cfg.train
    optimizer = torch.optim.AdamW(params, lr=t.lr, betas=tuple(t.betas), eps=t.adam_eps, weight_decay=t.weight_decay)
    # Constant lr after a linear warm-up (arXiv 2510.13786 §2: 100 warm-up steps, then constant).
    warm = max(t.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    sampler = PromptSampler(len(task.train), cfg.seed, recipe.retire_at)
    ctx = EngineContext(policy=policy, checkpoint=ckpt, device=device, body_dtype=body_dtype,
                        head_dtype=heads.gen_dtype, seed=cfg.seed)
    generator = GENERATORS[cfg.generation.name].fn(ctx, cfg=cfg.generation)
    return Run(task, recipe, tok, model, policy, generator, optimizer, scheduler, sampler, flop_params(model), params)
