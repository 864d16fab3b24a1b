"""Shared test fixtures, and the test tiers.

The warm-started tiny model is built once per session into a session cache
(SCALERL_CACHE), then reused by every test that trains; runs use one torch
thread so trajectories are exactly reproducible.

Tiers (docs/testing.md): ``slow`` (integration), ``slurm`` (cluster; tests/slurm marks its
folder) and ``gpu`` (tests/gpu marks its folder) are marked where the tests are; every other
test is marked ``unit`` here, so ``python -m pytest -m unit`` is the fast lane.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ANSWERS_ONLY

from scalerl.config import compose


_TESTS = Path(__file__).resolve().parent
_NOT_UNIT = ("slow", "slurm", "gpu")
_FOLDER_TIER = {_TESTS / "slurm": "slurm", _TESTS / "gpu": "gpu"}


def pytest_collection_modifyitems(config, items):
    # Runs after tests/slurm's and tests/gpu's own hooks (pytest calls the conftest registered
    # last first) and before ``-m`` deselects; the folder check keeps the order from mattering.
    for item in items:
        parents = Path(str(item.fspath)).parents
        folder = next((tier for d, tier in _FOLDER_TIER.items() if d in parents), None)
        if folder is None and not any(item.get_closest_marker(m) for m in _NOT_UNIT):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session", autouse=True)
def _session_env(tmp_path_factory):
    # Under pytest-xdist every worker has its own session; they share one cache beside their own
    # temporary folders, so the warm start is built once (its file lock makes the others wait).
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    cache = os.environ.get("SCALERL_TEST_CACHE") or (
        str(shared / "scalerl-cache") if shared else str(tmp_path_factory.mktemp("scalerl-cache")))
    os.environ["SCALERL_CACHE"] = cache
    os.environ["SCALERL_NO_BAR"] = "1"
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    yield


# The default's reasoning-shaped warm start costs about 3.5 of CI's 25 minutes, and the first
# integration test that needs it used to wait for all of it. Built in the background from the
# session's start, it overlaps the unit and cluster tests before it; a test that needs it early
# waits on the warm start's file lock (train/warmstart.py) instead of building it a second time.
# One thread, as the tests' runs use: the same checkpoint whoever builds it.
_PREBUILD = """
import torch
torch.set_num_threads(1)
from scalerl.config import compose, validate
from scalerl.train.setup import prepare_checkpoint
prepare_checkpoint(validate(compose(["logger=none", "train.threads=1"])), log=lambda *a, **k: None)
"""


@pytest.fixture(scope="session", autouse=True)
def _default_warm_start(request, _session_env, tmp_path_factory):
    if not any(item.get_closest_marker(m) for item in request.session.items for m in ("slow", "slurm")):
        yield  # the fast lane trains nothing that needs it
        return
    log = tmp_path_factory.mktemp("prebuild") / "warm_start.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _PREBUILD], stdout=out, stderr=subprocess.STDOUT,
                                cwd=_TESTS.parent, env={**os.environ, "SCALERL_NUM_THREADS": "1"})
    yield
    if proc.poll() is None:  # the session ended first (-x, a subset): nothing waits for it any more
        proc.kill()
    proc.wait()


@pytest.fixture
def tiny_cfg():
    """A validated config for short in-process training runs on the answers-only shape.
    Synchronous unless the test asks for another ``async`` option: a sync run is bit-reproducible."""
    from scalerl.config import validate

    def make(*overrides: str):
        other_task = any(o.startswith("task=") and o != "task=arith" for o in overrides)
        shape = [o for o in ANSWERS_ONLY if not (other_task and o.startswith("task."))]  # think is arith's
        return validate(compose(["logger=none", "train.threads=1", "async=sync", *shape, *overrides]))

    return make


@pytest.fixture(scope="session")
def task_files(tmp_path_factory):
    """Small real-format task files (Polaris-style math, DeepCoder-style code)."""
    from taskdata import MATH_ROWS, deepcoder_rows, write_jsonl, write_parquet

    d = tmp_path_factory.mktemp("task-files")
    return {"math": write_parquet(d / "polaris.parquet", MATH_ROWS), "code": write_jsonl(d / "deepcoder.jsonl", deepcoder_rows())}
