"""A run directory belongs to one config, and a checkpoint to one run (docs/outputs.md).

Through the real entry point: a pinned ``hydra.run.dir`` relaunched with other overrides is
refused in one line naming the differing keys, exit 2, nothing written; ``--fresh`` moves the
other run aside and starts from step 0; a renamed checkpoint, or one of another config, is
refused, not loaded.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, TINY_RUN, read_rows

from scalerl.launch.rundir import differing_keys, foreign_run, run_identity

RUN = [*TINY_RUN, "train.steps=1", "train.eval_every=1"]


def cli(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SCALERL_NO_BAR": "1"}
    return subprocess.run([sys.executable, "-m", "scalerl.sweep", *RUN, f"hydra.run.dir={run_dir}", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def snapshot(run_dir: Path) -> dict:
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in run_dir.rglob("*")
            if ".hydra" not in p.parts and p.name != "scalerl.log"}


def test_differing_keys_are_dotted_and_include_keys_present_on_one_side_only():
    old = {"loss": {"name": "cispo", "eps": 1}, "train": {"lr": 1e-4, "steps": 2}, "seed": 0}
    new = {"loss": {"name": "dapo"}, "train": {"lr": 1e-3, "steps": 2}, "seed": 0}
    assert differing_keys(old, new) == ["loss.eps", "loss.name", "train.lr"]
    assert differing_keys(old, old) == []


@pytest.mark.slow
def test_the_horizon_is_the_one_key_a_relaunch_may_change(tmp_path):
    # A finished run goes on for more steps in its own directory (train.steps), and its checkpoints
    # keep their identity; any other key (here the lr) is another run.
    from omegaconf import OmegaConf

    from scalerl.config import compose

    old = compose(["train.steps=2"])
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    OmegaConf.save(old, tmp_path / "config.yaml")
    longer, other = compose(["train.steps=3"]), compose(["train.steps=2", "train.lr=0.001"])
    assert foreign_run(tmp_path, longer) is None and run_identity(longer) == run_identity(old)
    why = foreign_run(tmp_path, other)
    assert why is not None and "train.lr" in why and "train.steps" not in why
    assert run_identity(other) != run_identity(old)


def test_a_run_directory_and_its_checkpoints_belong_to_one_run(tmp_path):
    run = tmp_path / "run"
    first = cli(run, "loss=cispo")
    assert first.returncode == 0, first.stderr[-3000:]
    before = snapshot(run)

    # another config in the same directory: refused, one line naming the keys, nothing written
    other = cli(run, "loss=dapo", "train.lr=1e-3")
    assert other.returncode == 2, other.stderr[-3000:]
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[scalerl] config error: hydra.run.dir:"), other.stderr
    assert "loss.name (cispo -> dapo)" in lines[0] and "train.lr (0.0001 -> 0.001)" in lines[0]
    assert "--fresh" in lines[0] and "Traceback" not in other.stderr
    assert snapshot(run) == before

    # a renamed checkpoint (step 1's file named step 5): refused by name, not loaded
    renamed = tmp_path / "renamed"
    shutil.copytree(run, renamed)
    (renamed / "summary.json").unlink()
    (renamed / "checkpoints" / "step_00000001.pt").rename(renamed / "checkpoints" / "step_00000005.pt")
    refused = cli(renamed, "loss=cispo")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines() == [refused.stderr.strip()]
    assert "step_00000005.pt: holds step 1, but its name says step 5" in refused.stderr
    assert "resuming" not in refused.stdout

    # --fresh: the cispo run moves aside whole; the dapo run starts from step 0 in the directory
    fresh = cli(run, "loss=dapo", "train.lr=1e-3", "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    aside = tmp_path / "run.replaced"
    assert f"moved to {aside}" in fresh.stdout and "resuming" not in fresh.stdout
    assert "name: cispo" in (aside / "config.yaml").read_text()
    assert "name: dapo" in (run / "config.yaml").read_text()
    assert [r["step"] for r in read_rows(aside / "metrics.jsonl")] == [0, 1]
    assert [r["step"] for r in read_rows(run / "metrics.jsonl")] == [0, 1]

    # a checkpoint of another config under the right name (dapo's step 1 in the cispo run): refused
    (aside / "summary.json").unlink()
    shutil.copy(run / "checkpoints" / "step_00000001.pt", aside / "checkpoints" / "step_00000001.pt")
    foreign = cli(aside, "loss=cispo")
    assert foreign.returncode == 2, foreign.stderr[-3000:]
    assert "step_00000001.pt: was written by a run of another config" in foreign.stderr
    assert len(foreign.stderr.strip().splitlines()) == 1 and "resuming" not in foreign.stdout
