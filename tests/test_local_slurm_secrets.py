"""The local cluster's secrets are created private, not chmod-ed private after they are
written: their directory is world-readable (users reach the munge socket through it),
so a write-then-chmod leaves a window in which any local user can read them."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from local_slurm import cluster, templates


@pytest.fixture
def no_chmod(monkeypatch):
    """Only the mode a file is created with counts: chmod after the fact does nothing here."""
    monkeypatch.setattr(Path, "chmod", lambda self, mode, **kw: None)
    monkeypatch.setattr(os, "chmod", lambda *a, **kw: None)
    old = os.umask(0o022)  # the usual umask: files default to world-readable
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_password_is_created_owner_only(tmp_path, no_chmod):
    lay = cluster.layout(tmp_path / "state")
    lay.state_dir.mkdir(parents=True)
    password = cluster._db_password(lay, create=True)
    assert len(password) >= 20 and mode(lay.state_dir / "db.password") == 0o600
    assert cluster._db_password(lay, create=True) == password  # created once, then reused


def test_slurmdbd_conf_with_the_password_is_created_owner_only(tmp_path, no_chmod, monkeypatch):
    monkeypatch.setattr(cluster, "CONF_DIR", tmp_path)
    cluster._write_conf("slurmdbd.conf", templates.HEADER + "StoragePass=secret\n", 0o600)
    assert mode(tmp_path / "slurmdbd.conf") == 0o600 and not (tmp_path / "slurmdbd.tmp").exists()
