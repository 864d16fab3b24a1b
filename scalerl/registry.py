"""The one registry of design axes, and the run's recipe built from it.

``AXES`` maps each design axis of the ScaleRL study (arXiv 2510.13786 §3.2) to
its registry dict. ``build_recipe`` turns a validated config into a frozen
``Recipe``: one callable per axis, with that axis's config bound, typed by the
axis's ``Protocol``. The rollout, the update and the loop call the recipe and
never look a registry up themselves, so an option's behaviour is fixed once,
by the option chosen.

Layer: above the axis packages, below models, tasks, generation and training.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Optional

from scalerl.adv_norm import ADV_NORMS
from scalerl.adv_norm.base import AdvNormFn
from scalerl.aggregation import AGGREGATIONS
from scalerl.aggregation.base import AggregateFn
from scalerl.asynchrony import ASYNC_MODES
from scalerl.asynchrony.base import Interleaving
from scalerl.core.option import Option
from scalerl.correction import CORRECTIONS
from scalerl.correction.base import CorrectionFn
from scalerl.filters import FILTERS
from scalerl.filters.base import FilterFn
from scalerl.length import LENGTHS
from scalerl.length.base import LengthFn
from scalerl.losses import LOSSES
from scalerl.losses.base import LossFn
from scalerl.precision import PRECISIONS
from scalerl.precision.base import HeadsFn
from scalerl.routing import ROUTINGS
from scalerl.routing.base import RouteFn

AXES: dict[str, dict[str, Option]] = {
    "loss": LOSSES,
    "aggregation": AGGREGATIONS,
    "adv_norm": ADV_NORMS,
    "precision": PRECISIONS,
    "filter": FILTERS,
    "length": LENGTHS,
    "correction": CORRECTIONS,
    "routing": ROUTINGS,
    "async": ASYNC_MODES,  # a Python keyword: reach the node with ``async_node(cfg)``
}


@dataclass(frozen=True)
class Recipe:
    """What a run does on each design axis, bound to its config."""

    loss: LossFn
    aggregate: AggregateFn
    advantages: AdvNormFn
    trains_on: FilterFn
    draw_lengths: LengthFn
    heads: HeadsFn
    correct: CorrectionFn
    """Generator-trainer mismatch correction (``correction``, docs/mismatch.md): per-token loss weights."""
    needs_old_logp: bool
    route: Optional[RouteFn]
    """The experts an MoE's trainer forwards use (``routing``, docs/mismatch.md); None: the routers' own."""
    """The correction needs π_old: one extra forward without gradient before the update."""
    retire_at: Optional[float]
    """No-Positive-Resampling threshold (``filter=zero_variance_npr``); None: never retire."""
    refill_rounds: int
    """DAPO dynamic-sampling refill rounds (``filter=dapo_dynamic``); 0: no refill."""
    interleaving: Interleaving
    """How generation and training interleave (``async``, arXiv 2510.13786 §3.1)."""


def async_node(cfg):
    """The ``async`` node of a config (``cfg.async`` is a syntax error: async is a keyword)."""
    return getattr(cfg, "async")


def bind(node, registry: dict[str, Option]):
    """The option's function with its config node bound as ``cfg``."""
    return partial(registry[node.name].fn, cfg=node)


def build_recipe(cfg) -> Recipe:
    """``cfg`` is the validated ``Config`` object (see ``scalerl.config.validate``)."""
    return Recipe(
        loss=bind(cfg.loss, LOSSES),
        aggregate=bind(cfg.aggregation, AGGREGATIONS),
        advantages=bind(cfg.adv_norm, ADV_NORMS),
        trains_on=bind(cfg.filter, FILTERS),
        draw_lengths=bind(cfg.length, LENGTHS),
        heads=bind(cfg.precision, PRECISIONS),
        correct=bind(cfg.correction, CORRECTIONS),
        needs_old_logp=cfg.correction.needs_old_logp(),
        route=bind(cfg.routing, ROUTINGS) if cfg.routing.replays() else None,
        retire_at=cfg.filter.retire_at,
        refill_rounds=cfg.filter.refill_rounds,
        interleaving=bind(async_node(cfg), ASYNC_MODES)(),
    )
