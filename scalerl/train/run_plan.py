"""The run plan: what a run's config decides, resolved once at start-up.

``validate`` (``scalerl.config``) checks a config and every cross-field rule; at
the run's start ``plan_run`` binds it to the process it runs in: the recipe of
axis functions (built once, ``registry.build_recipe``), the dtypes of the body and
the heads, the ranks and this rank's share of a step, the sampling settings and
the derived quantities written to ``derived.json``. The result is frozen. The
loop and the schedules read their settings from it and take the live objects
(model, optimizer, sampler, task: ``setup.Run``) beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from scalerl.asynchrony.base import Interleaving
from scalerl.config import check_ranks
from scalerl.config.derive import Derived, derive
from scalerl.models.load import compute_dtype, load_tokenizer
from scalerl.precision.base import Heads
from scalerl.registry import Recipe, build_recipe
from scalerl.train.distributed import Dist
from scalerl.train.rollout import encode_phrase


@dataclass(frozen=True)
class Sampling:
    """How the run samples every completion, training batches and evaluations alike."""

    tok: Any
    max_new_tokens: int
    """The length axis's budget (``length.max_new_tokens``)."""
    temperature: float
    device: torch.device
    """Where the sampled tensors live: the trainer's device."""

    def kw(self, generator) -> dict:
        """The keyword arguments of ``rollout.sample_and_score`` and ``heldout_pass_rate``, sampled by ``generator``."""
        return dict(generator=generator, tok=self.tok, max_new_tokens=self.max_new_tokens,
                    temperature=self.temperature, device=self.device)


@dataclass(frozen=True)
class RunPlan:
    cfg: Any
    """The validated ``Config``."""
    recipe: Recipe
    """The axis functions, bound to their options' settings."""
    derived: Derived
    sampling: Sampling
    dist: Dist
    """This process's rank, the ranks, the device and the mesh (None: not sharded)."""
    threads: int
    """CPU threads of the run's process (generator processes take a share, ``setup.build_schedule``)."""
    compute_dtype: torch.dtype
    """``model.dtype`` resolved for the device (auto: bf16 on GPU, fp32 on CPU)."""
    body_dtype: torch.dtype
    """The trainer's body dtype: the precision axis's, else the compute dtype."""
    heads: Heads
    attn: Optional[str]
    """The attention implementation every copy of the model loads with (``attn_implementation``)."""
    lean: bool
    """Every copy of the model is scalerl's own module (``models/llama.py``), not transformers':
    the model option asks for it (``scalerl_modeling``) and attention is eager, which it computes."""
    engine_in_generators: bool
    """The run's engine lives in the generator processes only (``async=pipeline_rl`` with an engine
    that loads its own weights, e.g. vLLM): they sample evaluations too, and the in-process
    generator only tracks the trainer's version."""
    engine_road: str
    """How the in-process engine gets the trainer's weights (``weights.py``): ``shared`` (it samples
    from the trainer's own module), ``copy`` (its own copy, the trainer being sharded) or
    ``load_weights`` (an engine with weights of its own, e.g. vLLM in the trainer's process)."""

    @property
    def interleaving(self) -> Interleaving:
        """The ``async`` axis: when generators run, how stale a token may be, when weights are pushed."""
        return self.recipe.interleaving

    @property
    def sharded(self) -> bool:
        return self.dist.mesh is not None

    @property
    def mine(self) -> slice:
        """This rank's share of a step's prompts (the same share with generator processes, ``pipeline.py``)."""
        per = self.derived.prompts_per_rank
        return slice(self.dist.rank * per, (self.dist.rank + 1) * per)


def body_dtype(cfg, recipe: Recipe, device: torch.device) -> torch.dtype:
    """The dtype the model body computes in: the precision axis's, else ``model.dtype`` (auto: bf16 on GPU).
    Known before the process group is joined: whether the trainer is sharded depends on it."""
    dtype = compute_dtype(cfg.model.dtype, device)
    return recipe.heads(dtype).body_dtype or dtype


def attn_implementation(cfg, body: torch.dtype) -> Optional[str]:
    """``model.attn_implementation`` with ``auto`` resolved for the trainer's body dtype ``body``:
    eager in fp32, else transformers' default. Eager is faster for the tiny model
    (``conf/model/tiny.yaml``) but not safe in bf16 under FSDP2: its fp32 mask of -3.4e38 becomes
    -inf when the layer inputs are cast, a padding row's softmax is then NaN, and 0 x NaN reaches
    the real tokens."""
    attn = cfg.model.attn_implementation
    if attn != "auto":
        return attn
    return "eager" if body == torch.float32 else None


def _road_kind(*, samples_policy: bool, remote: bool, sharded: bool) -> str:
    """``RunPlan.engine_road``: an engine that lives in the generator processes leaves the trainer
    only the version to track; one with weights of its own (vLLM) loads them; the torch engine
    samples from the trainer's module, or from its own copy when the trainer is sharded."""
    if remote:
        return "shared"
    if not samples_policy:
        return "load_weights"
    return "copy" if sharded else "shared"


def plan_run(cfg, dist: Dist, checkpoint: Path, *, threads: int = 1, recipe: Optional[Recipe] = None,
             body: Optional[torch.dtype] = None) -> RunPlan:
    """Bind the validated ``cfg`` to this process (``dist``) and the checkpoint it starts from: the
    ranks it really got are checked again here (``check_ranks``: torchrun says how many only now).
    ``recipe`` and ``body`` (``body_dtype``): the config's, when the caller has them already
    (``setup.build``: it needs them before the process group is joined)."""
    check_ranks(cfg, dist.world)
    recipe = build_recipe(cfg) if recipe is None else recipe
    tok = load_tokenizer(checkpoint)
    compute = compute_dtype(cfg.model.dtype, dist.device)
    body = body_dtype(cfg, recipe, dist.device) if body is None else body
    phrase = len(encode_phrase(tok, cfg.length.forced_phrase()))
    samples_policy = cfg.generation.samples_policy  # the option's schema says (generation/base.py)
    # With generator processes, an engine of its own (vLLM) runs only there, evaluation included
    # (``PipelineSchedule.eval_generator``): a second one here would double its start-up and memory.
    remote = recipe.interleaving.generators > 0 and not samples_policy
    road = _road_kind(samples_policy=samples_policy, remote=remote, sharded=dist.mesh is not None)
    attn = attn_implementation(cfg, body)
    return RunPlan(cfg=cfg, recipe=recipe, derived=derive(cfg, dist.world, phrase),
                   sampling=Sampling(tok=tok, max_new_tokens=cfg.length.max_new_tokens,
                                     temperature=cfg.train.temperature, device=dist.device),
                   dist=dist, threads=threads, compute_dtype=compute, body_dtype=body, heads=recipe.heads(compute),
                   attn=attn, lean=cfg.model.scalerl_modeling() and attn == "eager", engine_in_generators=remote,
                   engine_road=road)
