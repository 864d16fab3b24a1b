"""Fixtures for tests that run real jobs on the local SLURM cluster: this machine's node (partition
`debug`, the default) and three namespaced nodes (partition `nodes`).

`slurm_cluster` starts the cluster once per session (installing the Debian packages first if
they are missing and we are root), or finds it already running. If it cannot:
- in CI (`CI` set, not 0/false) or with SCALERL_REQUIRE_SLURM=1 the tests FAIL with the reason
  and the daemon's log tail, so a broken cluster is never reported as skipped tests;
- otherwise they are skipped with the reason (e.g. a laptop without root or apt).

The cluster is deliberately NOT stopped at session end: CI stops it with
`python3 tests/local_slurm stop`, and a user may keep it for `hydra/launcher=slurm`.
Every test collected under tests/slurm/ is marked `slurm` (deselect with -m "not slurm").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local_slurm import cluster

_HERE = Path(__file__).parent
NODES = 3
"""Namespaced nodes besides this machine's (own address and hostname each): node roles run there."""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def cluster_required() -> bool:
    return _flag("CI") or os.environ.get("SCALERL_REQUIRE_SLURM") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs the local SLURM cluster (see tests/local_slurm)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slurm)
            # One cluster of 2 cores: under pytest-xdist (`--dist loadgroup`) its jobs run from one worker.
            item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm_cluster():
    """The running local cluster's `Layout` (hostname, cpus, partition, state_dir)."""
    try:
        if cluster.missing_binaries() and os.geteuid() == 0:
            cluster.install()
        return cluster.start(n_nodes=NODES)
    except (cluster.ClusterError, OSError) as exc:
        reason = f"local SLURM cluster unavailable: {exc}"
    # Outside the except block, so the report is the reason alone, not a chained traceback.
    if cluster_required():
        pytest.fail(reason + "\n(CI or SCALERL_REQUIRE_SLURM=1 is set, so this is an error)",
                    pytrace=False)
    pytest.skip(reason)
