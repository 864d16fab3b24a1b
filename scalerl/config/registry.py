"""The registry entry type shared by every design axis.

Each axis package (``scalerl/losses``, ``scalerl/filters``, ...) exposes one
plain dict ``{hydra_option_name: Option(schema, fn)}``. Adding an option
touches exactly three places: its module, its YAML in ``conf/<axis>/`` and
one line in that dict. ``scalerl.config.store`` derives the ConfigStore
entries from these dicts, and a test checks that dict keys == YAML names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Option:
    schema: type
    """Config dataclass of the option (stored as ``schema/<axis>/<name>``)."""
    fn: Callable[..., Any]
    """The pure function (or factory) implementing the option."""


def axis_registries() -> dict[str, dict[str, Option]]:
    """Every axis with code behind it, keyed by its Hydra config group."""
    from scalerl.adv_norm import ADV_NORMS
    from scalerl.aggregation import AGGREGATIONS
    from scalerl.filters import FILTERS
    from scalerl.length import LENGTHS
    from scalerl.loggers import LOGGERS
    from scalerl.losses import LOSSES
    from scalerl.models import MODELS
    from scalerl.precision import PRECISIONS
    from scalerl.tasks import TASKS

    return {
        "loss": LOSSES,
        "aggregation": AGGREGATIONS,
        "adv_norm": ADV_NORMS,
        "precision": PRECISIONS,
        "filter": FILTERS,
        "length": LENGTHS,
        "model": MODELS,
        "task": TASKS,
        "logger": LOGGERS,
    }
