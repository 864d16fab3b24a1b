"""The top-level run config (Hydra primary schema ``base_config``).

``RunSettings`` holds what every run has whatever its options: the batch
knobs, the training settings and bookkeeping. ``Config`` adds one field per
option group of ``groups.OPTION_GROUPS``, typed ``Any`` here because each
option's own dataclass (stored as ``schema/<group>/<name>``) types and
validates its node.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from scalerl.config.groups import OPTION_GROUPS
from scalerl.core.errors import check

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class BatchConfig:
    """Primary batch knobs (arXiv 2510.13786 §2: 48 prompts x 16 generations)."""

    name: str = MISSING
    prompts: int = 16
    """Prompts per optimizer step (across all data-parallel ranks)."""
    generations: int = 16
    """Completions sampled per prompt (the group size G)."""
    minibatches: int = 2
    """Optimizer updates per generated batch; groups are never split across minibatches."""

    def __post_init__(self) -> None:
        check(self.prompts > 0, "batch.prompts", f"must be > 0, got {self.prompts}")
        check(self.generations > 1, "batch.generations",
              f"must be >= 2 (group-relative advantages need at least two samples), got {self.generations}")
        check(self.minibatches > 0, "batch.minibatches", f"must be > 0, got {self.minibatches}")
        check(self.prompts % self.minibatches == 0, "batch.minibatches",
              f"batch.prompts={self.prompts} must be divisible by batch.minibatches={self.minibatches}")


@dataclass
class TrainConfig:
    steps: int = 300
    """Optimizer steps (generation batches) in the run (the embedded default's size: docs/embedded.md)."""
    lr: float = 2e-5
    """Constant after warm-up (paper: 5e-7 at 8B; tiny models need far more, docs/embedded.md)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    adam_eps: float = 1e-8
    weight_decay: float = 0.01
    warmup_steps: int = 10
    """Linear warm-up of the learning rate from 0. The paper's 100 steps (§2) are a few percent of its
    runs of thousands of steps; 10 are the same share of the embedded default's 300. Warmed up for 100,
    the embedded run rose while its lr still grew, more steeply in compute than it then approached its
    plateau; one sigmoid follows only one of the two, and every half-compute forecast overshot
    (docs/findings.md, 2026-12-07).
    A run shorter than its warm-up is the start of a longer one: it never reaches ``lr``."""
    grad_clip: float = 1.0
    temperature: float = 0.6
    """Sampling temperature of training and held-out samples. The embedded default's: at 1.0 a character-level
    tiny model misspells one column sum in ten, and RL's slow sharpening of that noise hid the plateau
    (docs/embedded.md); set 1.0 for a real checkpoint (docs/tasks.md), as most RL recipes sample."""
    eval_every: Optional[int] = None
    """Steps between held-out evals (the every-N schedule); null (the default): ``eval_points`` evals
    spread evenly in log steps (``config/eval_schedule.py``). Above train.steps is allowed: the run
    evaluates at step 0 and its last step only (smoke tests)."""
    eval_points: int = 16
    """The log schedule's evals after step 0: evenly spaced in log steps from ``eval_first`` to
    train.steps, the last step always included (steps that round to the same one merge)."""
    eval_first: int = 10
    """The log schedule's first eval after step 0. The fit drops a run's start (analysis/fit.py,
    ``resolve_min_compute``: its first epoch, at most a quarter of its compute), so early points
    mostly draw the plot; steps 1-9 get none."""
    eval_samples: int = 2
    """Samples per held-out prompt; the pass rate is their mean (paper: 16)."""
    ckpt_every: int = 25
    """Checkpoint period in steps; every eval step is also checkpointed."""
    keep_checkpoints: int = 2
    device: str = "auto"
    """auto (cuda if available), cpu or cuda."""
    threads: int = 0
    """torch threads; 0 = auto (SCALERL_NUM_THREADS, SLURM_CPUS_PER_TASK, or all cores)."""
    max_nan_skips: int = 10
    """Abort after this many consecutive steps skipped for a non-finite loss."""
    gpus: int = 0
    """Devices this run is accounted for in device-hours (0 = auto: 1 per rank)."""
    export_policy: bool = True
    """At the end, write the final policy to <run dir>/final_policy/ as an ordinary HF checkpoint directory."""
    micro_batch_tokens: int = 0
    """Padded completion tokens per trainer forward: a rank's minibatch is cut into micro-batches
    (longest rows first, each padded to its own longest) whose gradients accumulate to the same
    update; 0 = off, one forward per minibatch (docs/trainer-memory.md)."""
    mismatch_groups: int = 2
    """Groups per step on which the mismatch metrics are also measured one version back: groups
    wholly sampled by the weights before the trainer's last update, whose log-probs the trainer
    recomputes with a kept copy of those weights (one forward without gradient; one rank only;
    0 = off, docs/mismatch.md). Under PipelineRL nearly every batch is of that version."""
    length_buckets: int = 4
    """Parts of a forward's rows, each padded only to its own longest completion (longest rows
    first, cut where a cut saves the most padded positions): the same log-probs, 0.59x the forward
    and backward's time on the step benchmark's batch (benchmarks/RESULTS.md). 1 = one grid padded to the longest row.
    A sharded trainer uses 1 (under FSDP2 every rank must run as many layer forwards)."""
    head_chunk: int = 0
    """Positions per LM-head chunk for the trainer's log-probs (the (N, T, V) logits are never
    held at once); 0 = auto, 256 MiB of fp32 logits per chunk (docs/trainer-memory.md)."""

    def __post_init__(self) -> None:
        check(self.steps > 0, "train.steps", f"must be > 0, got {self.steps}")
        check(self.lr > 0, "train.lr", f"must be > 0, got {self.lr}")
        check(self.adam_eps > 0, "train.adam_eps", f"must be > 0, got {self.adam_eps}")
        check(self.weight_decay >= 0, "train.weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.warmup_steps >= 0, "train.warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "train.betas", f"need two values in [0, 1), got {self.betas}")
        check(self.eval_every is None or self.eval_every > 0, "train.eval_every",
              f"must be > 0 (or null: the log schedule of train.eval_points), got {self.eval_every}")
        check(self.eval_points >= 2, "train.eval_points", f"must be >= 2 (the first and the last step), got {self.eval_points}")
        check(self.eval_first >= 1, "train.eval_first", f"must be >= 1, got {self.eval_first}")
        check(self.eval_samples > 0, "train.eval_samples", f"must be > 0, got {self.eval_samples}")
        check(self.ckpt_every > 0, "train.ckpt_every", f"must be > 0, got {self.ckpt_every}")
        check(self.keep_checkpoints >= 1, "train.keep_checkpoints", f"must be >= 1, got {self.keep_checkpoints}")
        check(self.temperature > 0, "train.temperature", f"must be > 0, got {self.temperature}")
        check(self.grad_clip > 0, "train.grad_clip", f"must be > 0, got {self.grad_clip}")
        check(self.device in DEVICES, "train.device", f"must be one of {DEVICES}, got {self.device!r}")
        check(self.threads >= 0, "train.threads", f"must be >= 0, got {self.threads}")
        check(self.max_nan_skips >= 1, "train.max_nan_skips", f"must be >= 1, got {self.max_nan_skips}")
        check(self.gpus >= 0, "train.gpus", f"must be >= 0 (0 = one per rank), got {self.gpus}")
        check(self.micro_batch_tokens >= 0, "train.micro_batch_tokens", f"must be >= 0 (0 = off), got {self.micro_batch_tokens}")
        check(self.mismatch_groups >= 0, "train.mismatch_groups", f"must be >= 0 (0 = off), got {self.mismatch_groups}")
        check(self.length_buckets >= 1, "train.length_buckets", f"must be >= 1 (1 = off), got {self.length_buckets}")
        check(self.head_chunk >= 0, "train.head_chunk", f"must be >= 0 (0 = auto), got {self.head_chunk}")


@dataclass
class RunSettings:
    batch: BatchConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    recipe: str = "custom"
    """Set by the ``recipe`` presets; informational."""
    study: str = "default"
    """The study this run belongs to: names the sweep directory and the W&B group; not part of the run hash."""
    sweep: Any = None
    """Study file(s) in sweeps/ to expand into arms: ``-m sweep=loo`` (crossed: ``'sweep=[loss,seeds]'``)."""
    cache_dir: str = "${oc.env:SCALERL_CACHE,'~/.cache/scalerl'}"
    """Where built/warm-started models are cached, keyed by config hash."""
    out_root: str = "${oc.env:SCALERL_OUTPUT,outputs}"
    """Root of run and sweep directories (see hydra.run.dir / hydra.sweep.dir)."""


def _group_field(group: str):
    # A group named by a Python keyword (``async``) cannot be an __init__ argument or appear in
    # generated code: it becomes an init=False field without a default, which OmegaConf sets after
    # construction. Read it with getattr (``scalerl.registry.async_node``).
    if keyword.iskeyword(group):
        return field(init=False, repr=False, compare=False)
    return field(default=MISSING)


Config = dataclass(type("Config", (RunSettings,), {
    "__annotations__": {group: Any for group in OPTION_GROUPS},
    **{group: _group_field(group) for group in OPTION_GROUPS},
    "__module__": __name__,
    "__doc__": "A run: ``RunSettings`` plus one node per option group (``groups.OPTION_GROUPS``).",
}))
