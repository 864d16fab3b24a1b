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
from typing import Any, Optional

import torch

from scalerl.asynchrony.base import Interleaving
from scalerl.config import check_ranks
from scalerl.config.derive import Derived, derive
from scalerl.models.load import compute_dtype
from scalerl.precision.base import Heads
from scalerl.registry import Recipe, async_node, build_recipe
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
    """CPU threads of the run's process (generator processes take a share, ``setup.build_road``)."""
    compute_dtype: torch.dtype
    """``model.dtype`` resolved for the device (auto: bf16 on GPU, fp32 on CPU)."""
    body_dtype: torch.dtype
    """The trainer's body dtype: the precision axis's, else the compute dtype."""
    heads: Heads
    attn: Optional[str]
    """The attention implementation every copy of the model loads with (``attn_implementation``)."""
    road: RoadKind
    """The road the trainer's weights take (``road_kind``, the one table; ``setup.build_road``)."""
    schedule: str
    """The schedule the ``async`` option names (``AsyncConfig.schedule``; ``schedules.schedule_class``)."""
    lean: bool
    """Every copy of the model is scalerl's own module (``models/llama.py``), not transformers':
    the model option asks for it (``scalerl_modeling``) and attention is eager, which it computes."""

    @property
    def interleaving(self) -> Interleaving:
        """The ``async`` axis: when generators run, how stale a token may be, when weights are pushed."""
        return self.recipe.interleaving

    @property
    def engine_in_generators(self) -> bool:
        """The run's engine lives in the generator processes only (generator processes with an
        engine that loads its own weights, e.g. vLLM): they sample evaluations too, and the
        in-process generator only tracks the trainer's version."""
        return self.road.engine == "version"

    @property
    def sharded(self) -> bool:
        return self.dist.mesh is not None

    @property
    def rank_groups(self) -> slice:
        """This rank's share of a step's prompts (the same share with generator processes, ``pipeline.py``)."""
        per = self.derived.prompts_per_rank
        return slice(self.dist.rank * per, (self.dist.rank + 1) * per)


def body_dtype(recipe: Recipe, compute: torch.dtype) -> torch.dtype:
    """The dtype the model body computes in: the precision axis's, else the compute dtype (``model.dtype``,
    auto: bf16 on GPU). Known before the process group is joined: whether the trainer is sharded depends on it."""
    return recipe.heads(compute).body_dtype or compute


@dataclass(frozen=True)
class Resolved:
    """What the config decides before the process group is joined, resolved once (``resolve``):
    ``plan_run`` binds it to the ranks the process got."""

    recipe: Recipe
    compute_dtype: torch.dtype
    body_dtype: torch.dtype
    tok: Any


def resolve(cfg, device: torch.device, tok) -> Resolved:
    """The recipe, the dtypes and the tokenizer (``tok``, loaded once with the checkpoint, ``setup``)."""
    recipe = build_recipe(cfg)
    compute = compute_dtype(cfg.model.dtype, device)
    return Resolved(recipe=recipe, compute_dtype=compute, body_dtype=body_dtype(recipe, compute), tok=tok)


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


@dataclass(frozen=True)
class RoadKind:
    """Which ends the run's ``weights.Road`` has (``road_kind``); ``setup.build_road`` builds them."""

    engine: str
    """The in-process engine's end: ``shared`` (``SharedModule``: it samples from the trainer's own
    module), ``copy`` (``Copy``: its own copy, the trainer being sharded), ``load_weights``
    (``LoadWeights``: an engine with weights of its own, e.g. vLLM in the trainer's process) or
    ``version`` (``SharedModule``: the run's engine lives in the generator processes, the torch
    sampler here only tracks the version)."""
    batches: Optional[str]
    """Where the training batches come from, when not from that engine: ``own_sampler``
    (``LoadWeights`` into a torch engine with a body dtype of its own, ``precision.generator_body``),
    ``remote`` (``Remote``: generator processes); None: the in-process engine samples them."""


def road_kind(*, generators: int, samples_policy: bool, sharded: bool, own_dtype: bool) -> RoadKind:
    """The one table from the plan to the road (docs/architecture.md, 'The road for the weights'):

    ==================  =============================  ================================  ===========
    batches from        the run's engine               in-process engine's end           batches end
    ==================  =============================  ================================  ===========
    generator procs     loads its own weights (vLLM)   version (the engine is there)     remote
    generator procs     samples the policy (torch)     copy if sharded, else shared      remote
    trainer's process   loads its own weights (vLLM)   load_weights                      None
    trainer's process   samples the policy (torch)     copy if sharded, else shared      own_sampler
                                                                                         if own_dtype
    ==================  =============================  ================================  ===========

    ``generators``: the async option's generator processes (the batches come from them when >= 1,
    as its schedule says, ``AsyncConfig.schedule``); ``samples_policy``: the generation option's
    (``generation/base.py``); ``own_dtype``: the precision axis gives the generator a body dtype other
    than the trainer's, or rounds its weights to one. With generator processes, an engine of its own
    (vLLM) runs only there, evaluation included (``PipelineSchedule.eval_generator``): a second one
    here would double its start-up and memory.

    >>> road_kind(generators=0, samples_policy=True, sharded=False, own_dtype=True)
    RoadKind(engine='shared', batches='own_sampler')
    >>> road_kind(generators=1, samples_policy=False, sharded=True, own_dtype=True)
    RoadKind(engine='version', batches='remote')
    """
    policy_end = "copy" if sharded else "shared"
    if generators > 0:
        return RoadKind(policy_end if samples_policy else "version", "remote")
    if not samples_policy:
        return RoadKind("load_weights", None)
    return RoadKind(policy_end, "own_sampler" if own_dtype else None)


def plan_run(cfg, dist: Dist, resolved: Resolved, *, threads: int = 1) -> RunPlan:
    """Bind the validated ``cfg``, as ``resolve`` resolved it, to this process (``dist``): the ranks
    it really got are checked again here (``check_ranks``: torchrun says how many only now)."""
    check_ranks(cfg, dist.world)
    recipe, tok, compute, body = resolved.recipe, resolved.tok, resolved.compute_dtype, resolved.body_dtype
    phrase = len(encode_phrase(tok, cfg.length.forced_phrase()))
    heads = recipe.heads(compute)
    gen_dtype = heads.gen_body_dtype or body
    own_dtype = gen_dtype != body or heads.gen_round_dtype not in (None, gen_dtype)
    road = road_kind(generators=recipe.interleaving.generators, samples_policy=cfg.generation.samples_policy,
                     sharded=dist.mesh is not None, own_dtype=own_dtype)
    attn = attn_implementation(cfg, body)
    return RunPlan(cfg=cfg, recipe=recipe, derived=derive(cfg, dist.world, phrase),
                   sampling=Sampling(tok=tok, max_new_tokens=cfg.length.max_new_tokens,
                                     temperature=cfg.train.temperature, device=dist.device),
                   dist=dist, threads=threads, compute_dtype=compute, body_dtype=body, heads=heads,
                   attn=attn, lean=cfg.model.scalerl_modeling() and attn == "eager", road=road,
                   schedule=async_node(cfg).schedule())
