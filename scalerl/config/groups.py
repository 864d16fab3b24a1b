"""Every config group with code behind it, in one place, derived from the registries.

``OPTION_GROUPS`` is the design axes of ``scalerl.registry.AXES`` plus the
components every run also chooses (model, task, generation engine, logger). The run schema, the
config store, run identity and the tests all read the list of groups from
here. ``PRESET_GROUPS`` are YAML-only groups (value presets, no code).
"""
from __future__ import annotations

from scalerl.core.option import Option
from scalerl.generation import GENERATORS
from scalerl.loggers import LOGGERS
from scalerl.models import MODELS
from scalerl.registry import AXES
from scalerl.tasks import TASKS

OPTION_GROUPS: dict[str, dict[str, Option]] = {**AXES, "model": MODELS, "task": TASKS, "generation": GENERATORS,
                                               "logger": LOGGERS}
PRESET_GROUPS = ("batch", "recipe")
"""Groups whose options are YAML presets of values only."""
BOOKKEEPING_GROUPS = ("logger",)
"""Groups that do not change what a run computes: left out of its hash and its axes."""


def run_axes() -> list[str]:
    """The groups that label a run in summaries and leaderboards: every option
    group that changes what it computes, plus the batch preset."""
    return [g for g in OPTION_GROUPS if g not in BOOKKEEPING_GROUPS] + ["batch"]
