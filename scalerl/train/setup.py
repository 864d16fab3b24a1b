"""Build everything a run needs from its validated config (no training here)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from scalerl.generation import TorchGenerator
from scalerl.models import MODELS
from scalerl.models.base import compute_dtype
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy
from scalerl.precision import PRECISIONS
from scalerl.tasks import TASKS
from scalerl.train.compute import flop_params
from scalerl.train.sampler import PromptSampler


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from scalerl.config.errors import ConfigError

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
    task: object
    tok: object
    model: torch.nn.Module
    policy: Policy
    generator: TorchGenerator
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: PromptSampler
    n_params: int
    params: list


def prepare_checkpoint(cfg, log=print) -> tuple[object, Path]:
    """The task and the local checkpoint to load (built / warm-started and cached if needed).

    Call this before joining a process group: HF's save_pretrained writes
    nothing on non-zero ranks, and the file lock already makes one process
    build while the others wait.
    """
    task = TASKS[cfg.task.name].fn(cfg.task)
    return task, MODELS[cfg.model.name].fn(cfg.model, cfg.task, task, Path(cfg.cache_dir).expanduser(), log=log)


def build_run(cfg, task, ckpt: Path, device: torch.device) -> Run:
    dtype = compute_dtype(cfg.model.dtype, device)
    heads = PRECISIONS[cfg.precision.name].fn(cfg.precision, dtype)
    model, tok = load_checkpoint(ckpt, dtype=heads.body_dtype or dtype, device=device,
                                 attn_implementation=cfg.model.attn_implementation)
    model.train()  # no dropout in the tiny model; real checkpoints set their own
    policy = Policy(model, gen_head=heads.gen, train_head=heads.train, temperature=cfg.train.temperature)
    params = [p for p in model.parameters() if p.requires_grad]
    t = cfg.train
    optimizer = torch.optim.AdamW(params, lr=t.lr, betas=tuple(t.betas), eps=t.adam_eps, weight_decay=t.weight_decay)
    # Constant lr after a linear warm-up (PAPER.md §2: 100 warm-up steps, then constant).
    warm = max(t.warmup_steps, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    sampler = PromptSampler(len(task.train), cfg.seed, cfg.filter.npr_threshold)
    return Run(task, tok, model, policy, TorchGenerator(policy, device), optimizer, scheduler, sampler,
               flop_params(model), params)
