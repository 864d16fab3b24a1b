"""The fast lane needs no apt package (docs/testing.md): a unit test runs with bubblewrap, SLURM's
clients and Chromium off its PATH (``tests/conftest.py``), so a unit test that needs one fails on
every machine, including CI's, which has them all."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import APT_BINARIES, TIER_ENV, path_without, skip_without_apt_package

from scalerl.tasks.sandbox import Sandbox, SandboxConfig, namespaces_available


def test_a_unit_test_finds_no_apt_binary_nor_do_its_processes():
    assert os.environ[TIER_ENV] == "unit"
    assert [b for b in sorted(APT_BINARIES) if shutil.which(b)] == []
    found = subprocess.run(["sh", "-c", "command -v bwrap sbatch srun chromium"], capture_output=True, text=True)
    assert found.returncode != 0 and found.stdout == ""
    # everything else is still there: the interpreter, the shell's tools
    assert shutil.which("sh") and shutil.which("env")
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


def test_a_unit_test_that_grades_code_under_bubblewrap_fails():
    # isolation=auto without the unsafe fallback: what task=code's tests did in the fast lane
    assert "bubblewrap (bwrap) is not installed" == namespaces_available(SandboxConfig(isolation="namespaces"))
    with pytest.raises(RuntimeError, match="bubblewrap is unavailable"):
        Sandbox(SandboxConfig())


def test_a_unit_test_that_would_skip_without_an_apt_package_fails_instead():
    with pytest.raises(pytest.fail.Exception, match="mark it @pytest.mark.system"):
        skip_without_apt_package("namespaces backend unavailable: bubblewrap (bwrap) is not installed")


@pytest.mark.system
def test_a_system_test_keeps_the_path():
    assert TIER_ENV not in os.environ
    if shutil.which("bwrap") is None:  # the README's install alone: the system tier cannot run here
        skip_without_apt_package("bubblewrap is not installed")
    assert namespaces_available(SandboxConfig(isolation="namespaces")) == ""


def test_path_without_hides_only_the_named_programs(tmp_path):
    bin_a, bin_b = tmp_path / "a", tmp_path / "b"
    for d, names in ((bin_a, ("bwrap", "ls", "chromium")), (bin_b, ("cat",))):
        d.mkdir()
        for n in names:
            (d / n).write_text("#!/bin/sh\n")
            (d / n).chmod(0o755)
    path = path_without({"bwrap", "chromium"}, f"{bin_a}:{bin_b}", tmp_path / "farm")
    first, second = path.split(":")
    assert second == str(bin_b)                           # a folder without them is kept as it is
    assert sorted(os.listdir(first)) == ["ls"]            # the other holds links to the rest
    assert os.path.realpath(os.path.join(first, "ls")) == str(bin_a / "ls")
    assert shutil.which("ls", path=path) and shutil.which("cat", path=path) and not shutil.which("bwrap", path=path)
    assert (bin_a / "bwrap").exists()                     # nothing was moved
