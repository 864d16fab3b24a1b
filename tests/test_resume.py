"""Resuming after a stop at the worst moments: SIGTERM during the step-0 eval, a disk that
fills at the step-0 checkpoint, and a policy that diverges before an eval."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ANSWERS_ONLY, REPO, VOLATILE, read_rows

from scalerl.core.jsonio import JsonlFile
from scalerl.train import loop
from scalerl.train.loop import train


def run(cfg, run_dir: Path) -> dict:
    return train(cfg, run_dir, run_name=run_dir.name, group="test", config_dict={})


def stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


@pytest.mark.slow
def test_sigterm_during_the_step0_eval_then_resume_keeps_one_step0_row(tiny_cfg, tmp_path, monkeypatch):
    cfg = tiny_cfg("train.steps=2", "train.eval_every=1")
    run(cfg, tmp_path / "ref")
    real = loop.heldout_pass_rate
    calls = []

    def terminated_during(*args, **kwargs):  # the signal lands while the step-0 eval runs
        calls.append(kwargs["step"])
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "heldout_pass_rate", terminated_during)
    assert run(cfg, tmp_path / "r")["status"] == "interrupted"  # it checkpointed step 0 and stopped
    assert [r["step"] for r in JsonlFile(tmp_path / "r" / "metrics.jsonl").rows()] == [0]
    assert run(cfg, tmp_path / "r")["status"] == "done"
    assert calls == [0, 1, 2]  # step 0 was evaluated once
    got = JsonlFile(tmp_path / "r" / "metrics.jsonl").rows()
    assert [r["step"] for r in got] == [0, 1, 2]
    assert stable(got) == stable(JsonlFile(tmp_path / "ref" / "metrics.jsonl").rows())


@pytest.mark.slow
def test_a_diverged_policy_gets_no_eval_row(tiny_cfg, tmp_path, monkeypatch):
    real = loop.policy_update

    def diverging(policy, *args, **kwargs):  # what train.lr=inf did: every parameter NaN after the update
        out = real(policy, *args, **kwargs)
        with torch.no_grad():
            next(policy.model.parameters()).fill_(float("nan"))
        return out

    monkeypatch.setattr(loop, "policy_update", diverging)
    with pytest.raises(FloatingPointError, match="non-finite parameters"):
        run(tiny_cfg("train.steps=2", "train.eval_every=1"), tmp_path / "r")
    assert [r["step"] for r in JsonlFile(tmp_path / "r" / "metrics.jsonl").rows()] == [0]  # no NaN policy's 0.0


def _limit_file_size():
    """In the child: a write past 2 MB fails with EFBIG, as a full disk fails with ENOSPC. The
    cached tiny model and the step-0 checkpoint (1.2 MB each) fit; the step-1 checkpoint, with
    Adam's moments (3.6 MB), does not."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.slow
def test_a_full_disk_names_the_file_cleans_up_keeps_a_summary_and_resumes_once(tmp_path):
    # The answers-only shape: the checkpoint (the same model and optimizer) is what fills the disk,
    # and 3 evals of 8-token answers cost a fraction of the thinking shape's (246 s in CI).
    args = [sys.executable, "-m", "scalerl.sweep", "train.steps=2", "train.eval_every=1", "train.threads=1",
            "logger=none", f"hydra.run.dir={tmp_path / 'run'}", *ANSWERS_ONLY]
    env = {**os.environ, "SCALERL_NO_BAR": "1"}
    full = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=_limit_file_size)
    assert full.returncode != 0
    ckpt = tmp_path / "run" / "checkpoints" / "step_00000001.pt"
    error = f"could not write checkpoint {ckpt}: File too large (EFBIG)"
    assert error in full.stderr
    assert not [p.name for p in (tmp_path / "run").rglob("*.tmp")]  # no partial checkpoint, no empty temporaries
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and error in summary["error"]
    again = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in again.stdout  # from the step-0 checkpoint, without a second step-0 row
    assert [r["step"] for r in read_rows(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2]
