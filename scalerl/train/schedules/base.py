"""What every async schedule is: the ``Schedule`` the loop calls, the ``Batch`` it hands over
and the per-batch staleness metrics (``batch_stats``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from scalerl.asynchrony.base import version_stats
from scalerl.generation import Generator
from scalerl.train.rollout import Rollout


@dataclass
class Batch:
    rollout: Rollout
    """This rank's share of the step's batch."""
    prompts: list[int]
    """The whole step's prompt indices (identical on every rank)."""
    fresh: torch.Tensor
    """(P_rank,) bool on the CPU, like the rewards: groups within the lag bound (a group that is not
    is dropped, see ``within_lag``)."""


class Schedule(Protocol):
    """Built as ``Cls(plan, r, road)``: the ``RunPlan``, the live ``Run`` and the road the weights
    take (``setup.build_road``); the ``async`` option names the class (``AsyncConfig.schedule``)."""

    generator_devices: int
    """Devices the generators use besides the trainer's (device-hours count them)."""
    pids: list[int]
    """The generator processes (none in the trainer's process)."""
    eval_generator: Generator
    """What samples the held-out evaluation, at the trainer's current version."""
    eval_on_main: bool
    """Only rank 0 can sample with ``eval_generator``: it evaluates the whole split alone."""

    def start(self, version: int) -> None: ...

    def rollout(self, step: int) -> Batch: ...

    def publish(self, step: int) -> None:
        """The trainer now holds version ``step``: hand it to the generators along the run's road
        (``weights.Road``), as the interleaving says."""

    def stats(self, wall: float) -> dict:
        """This step's async metrics, given its wall time."""

    def sampler_state(self, step: int) -> dict:
        """The prompt sampler's state to checkpoint at ``step``."""

    def epochs_done(self, step: int) -> float: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def close(self) -> None: ...


def batch_stats(ro: Rollout, fresh: torch.Tensor, trainer_version: int) -> dict:
    """Staleness, multi-version completions and lag-bound drops of one consumed batch."""
    return {**version_stats(ro.gen.version, ro.gen.present, trainer_version), "lag_dropped": int((~fresh).sum())}
