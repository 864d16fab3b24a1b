"""The async schedules: which weights generate which step's batch (arXiv 2510.13786 §3.1).

The loop asks its schedule for each step's batch (``rollout``), trains on it, then hands
the new weights over (``publish``, along the run's ``weights.Road``). Every ``async``
option names the schedule that carries it out (``AsyncConfig.schedule()``, as
``"<module>.<Class>"`` of this package); ``schedule_class`` resolves the name once, at
set-up (``setup.build_schedule``):

- ``local.LocalSchedule``: the trainer's process generates (``sync`` and
  ``ppo_off_policy`` with ``async.generators=0``);
- ``pipeline.PipelineSchedule``: generator processes with their own weights stream
  within the lag bound (``pipeline_rl``; ``sync`` and ``ppo_off_policy`` with
  ``async.generators >= 1``).

Each is built as ``Cls(plan, r, road)`` and follows ``base.Schedule``. They report, per
step: the staleness of the consumed tokens, the fraction of completions spanning several
versions, the queue depth, the idle fractions of the generator and trainer sides and the
weight-push time. A new schedule is one module here (docs/architecture.md, 'Adding an
async mode'): the option names it, so no table grows.
"""
from __future__ import annotations

import importlib
import importlib.util


def schedule_class(name: str) -> type:
    """The schedule class an ``async`` option names: ``"<module>.<Class>"`` of this package. The
    axis layer holds the name only (it sits below ``train/``), and a name resolves inside this
    package alone, so an option can name nothing above it."""
    module, _, cls = name.rpartition(".")
    found = importlib.util.find_spec(f"{__name__}.{module}") if module else None
    schedule = getattr(importlib.import_module(found.name), cls, None) if found else None
    if not isinstance(schedule, type):
        raise LookupError(f"the async option's schedule {name!r} is not a class of scalerl/train/schedules/"
                          f"{module or '?'}.py (AsyncConfig.schedule returns '<module>.<Class>')")
    return schedule
