"""The SLURM requeue of a preempted job survives the preemption's own SIGTERM, transient
errors, and an attempt that reached slurmctld but looked failed. No cluster needed: a fake
``scontrol`` on PATH plays slurmctld (tests/slurm/test_cluster.py does it for real, under load)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scalerl.launch import requeue as rq


def fake_scontrol(tmp_path: Path, monkeypatch, body: str) -> Path:
    """Put a bash ``scontrol`` first on PATH; it appends each call's arguments to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/bash\necho "$*" >> {log}\nn=$(grep -c "^requeue" {log})\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(rq.time, "sleep", lambda s: None)  # the backoff, not a synchronisation
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_requeue_survives_a_sigterm_that_arrives_while_scontrol_runs(tmp_path, monkeypatch):
    """What killed the flaky test: the preemption's SIGTERM reached `scontrol requeue` itself."""
    log = fake_scontrol(tmp_path, monkeypatch, 'if [ "$1" = requeue ]; then kill -TERM $$; exit 0; fi')
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    rq.harden_submitit()
    from submitit.slurm.slurm import SlurmJobEnvironment

    SlurmJobEnvironment()._requeue(countdown=3)  # what submitit's USR2 handler calls
    assert calls(log) == ["requeue 42"]


def test_a_transient_failure_is_retried(tmp_path, monkeypatch):
    log = fake_scontrol(tmp_path, monkeypatch, '''
if [ "$1" = requeue ] && [ "$n" = 1 ]; then echo "Socket timed out on send/recv operation" >&2; exit 1; fi
if [ "$1" = show ]; then echo "JobId=42 JobState=RUNNING Restarts=0"; fi
exit 0''')
    rq.requeue("42", restarts=0, log=lambda *_: None)
    assert calls(log) == ["requeue 42", "show job -o 42", "requeue 42"]


def test_an_attempt_that_got_through_is_not_repeated(tmp_path, monkeypatch):
    """Killed after slurmctld took the request (SIGKILL cannot be ignored): the job is already
    pending again, so a second `scontrol requeue` must not be sent."""
    log = fake_scontrol(tmp_path, monkeypatch, '''
if [ "$1" = requeue ]; then kill -KILL $$; fi
if [ "$1" = show ]; then echo "JobId=42 JobState=PENDING Reason=BeginTime Restarts=1"; fi''')
    rq.requeue("42", restarts=0, log=lambda *_: None)
    assert calls(log) == ["requeue 42", "show job -o 42"]


def test_a_job_that_cannot_be_requeued_fails_loudly(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, '''
if [ "$1" = requeue ]; then echo "Requested operation is presently disabled" >&2; exit 1; fi
if [ "$1" = show ]; then echo "JobId=42 JobState=RUNNING Restarts=0"; fi''')
    with pytest.raises(RuntimeError, match="could not requeue SLURM job 42 after 3 attempts: Requested operation"):
        rq.requeue("42", attempts=3, restarts=0, log=lambda *_: None)
