"""Shared test fixtures, and the test tiers.

The default's warm-started tiny model is shipped with the package (scalerl/models/assets), the
answers-only shape's lives beside the tests (tests/assets, found through SCALERL_WARM_STARTS, which
the session sets); a test whose warm-start settings differ builds its own once into the session
cache (SCALERL_CACHE).
Runs use one torch thread so trajectories are exactly reproducible.

Tiers (docs/testing.md): ``slow`` (integration), ``system`` (needs an apt package: bubblewrap,
SLURM's clients, Chromium), ``slurm`` (cluster; tests/slurm marks its folder) and ``gpu``
(tests/gpu marks its folder) are marked where the tests are; every other test is marked ``unit``
here, so ``python -m pytest -m unit`` is the fast lane.

The fast lane must pass right after the README's pip install, where no apt package is installed,
so a unit test runs as it would there, on every machine: ``helpers.APT_BINARIES`` are off its PATH, and the
sandbox's cached bubblewrap probe is reset around it. A unit test that needs one of them fails
here too, not only on a user's machine; mark it ``system``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import ANSWERS_ONLY, APT_BINARIES, TEST_WARM_STARTS, TIER_ENV, WARM_STARTS_ENV, path_without

from scalerl.config import compose


_TESTS = Path(__file__).resolve().parent
_NOT_UNIT = ("slow", "system", "slurm", "gpu")
_FOLDER_TIER = {_TESTS / "slurm": "slurm", _TESTS / "gpu": "gpu"}


def pytest_collection_modifyitems(config, items):
    # Runs after tests/slurm's and tests/gpu's own hooks (pytest calls the conftest registered
    # last first) and before ``-m`` deselects; the folder check keeps the order from mattering.
    for item in items:
        parents = Path(str(item.fspath)).parents
        folder = next((tier for d, tier in _FOLDER_TIER.items() if d in parents), None)
        if folder is None and not any(item.get_closest_marker(m) for m in _NOT_UNIT):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def _path_without_apt(tmp_path_factory) -> str:
    return path_without(APT_BINARIES, os.environ.get("PATH", os.defpath), tmp_path_factory.mktemp("path-without-apt"))


@pytest.fixture(autouse=True)
def _unit_without_apt_packages(request, monkeypatch):
    """A unit test runs as after the README's pip install alone (the module doc)."""
    if request.node.get_closest_marker("unit") is not None:
        from scalerl.tasks.sandbox import runner

        monkeypatch.setenv("PATH", request.getfixturevalue("_path_without_apt"))
        monkeypatch.setenv(TIER_ENV, "unit")
        monkeypatch.setattr(runner, "_PROBES", {})  # a probe made with bubblewrap in sight, or without it
    yield


@pytest.fixture(scope="session", autouse=True)
def _session_env(tmp_path_factory):
    # Under pytest-xdist every worker has its own session; they share one cache beside their own
    # temporary folders, so the warm start is built once (its file lock makes the others wait).
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    cache = os.environ.get("SCALERL_TEST_CACHE") or (
        str(shared / "scalerl-cache") if shared else str(tmp_path_factory.mktemp("scalerl-cache")))
    os.environ["SCALERL_CACHE"] = cache
    os.environ[WARM_STARTS_ENV] = str(TEST_WARM_STARTS)  # ANSWERS_ONLY's warm start, for runs here and in children
    os.environ["SCALERL_NO_BAR"] = "1"
    # A run that leaves train.threads at auto would take every core, as many times as workers run
    # one: on 2 cores under -n 3 the routing metrics' two 1-step runs took 55 s instead of 16 s
    # (docs/testing.md). A sweep's arms still get their share from the launcher, which sets this itself.
    os.environ.setdefault("SCALERL_NUM_THREADS", "1")
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    yield


# The default's warm start is shipped (scalerl/models/assets) and the answers-only shape's is in
# tests/assets (docs/embedded.md): no test trains SFT unless it changes the warm start's settings,
# so nothing is built in the background any more (it cost 3.5 of CI's 25 minutes before).


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
