"""Deterministic PipelineRL schedules for tests, injected from outside the production path.

``pace(monkeypatch, mode, swap_at)`` pins one of two extremes (and optionally a forced
in-flight swap) so a test can assert exact staleness:

- ``generators_first``: the trainer takes a step only once every generator can do nothing
  more without a newer version (fast generators, slow trainer);
- ``trainer_first``: a generator starts batch s only with version s-1 (slow generators).

The trainer side is a wrapper around ``PipelineSchedule.rollout``; the generator side is
``tests/paced_worker.py``, started in place of the real worker module.
"""
from __future__ import annotations

from pathlib import Path

from scalerl.generation.fleet.pool import GeneratorPool
from scalerl.train.schedules.pipeline import PipelineSchedule

WORKER = (str(Path(__file__).with_name("paced_worker.py")),)


def wait_blocked(pool: GeneratorPool, version: int) -> None:
    """Wait until every generator has marked that it can do nothing more without ``version``."""
    keys = [f"blocked/{j}/{version}" for j in range(pool.n)]
    pool.hub.wait(lambda: pool.hub.has(keys), f"waiting for the generators to run ahead (version {version})")


def pace(monkeypatch, mode: str = "free", swap_at: int = -1) -> None:
    assert mode in ("free", "generators_first", "trainer_first"), mode
    monkeypatch.setattr(GeneratorPool, "worker", WORKER)
    monkeypatch.setenv("SCALERL_TEST_PACE", f"{mode}:{swap_at}")
    if mode == "generators_first":
        real = PipelineSchedule.rollout

        def rollout(self, step):
            wait_blocked(self.pool, step)
            return real(self, step)

        monkeypatch.setattr(PipelineSchedule, "rollout", rollout)
