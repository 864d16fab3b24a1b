"""Is an arm running? pid and host where they can be checked, the heartbeat only for
another host; a run's lock answers "busy" to a second sweep; a sweep never writes
"failed" over a run that finished or is still live."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_for

from scalerl.launch import rundir, sweeping

HOST = socket.gethostname()


def identity() -> dict:
    from scalerl.core.liveness import identity

    return identity()


def progress(run_dir: Path, **fields) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"status": "running", "step": 3, "total": 10, "updated_at": time.time(), **fields}
    (run_dir / "progress.json").write_text(json.dumps(record))
    return run_dir


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # reaped: this pid names no process now
    return p.pid


def test_a_killed_run_on_this_host_is_not_running_despite_a_fresh_heartbeat(tmp_path):
    # kill -9 of a whole sweep: progress.json still says running, updated a second ago
    run = progress(tmp_path / "r", pid=dead_pid(), host=HOST)
    assert rundir.arm_state(run) == "interrupted"


def test_a_live_run_on_this_host_is_running_even_with_an_old_heartbeat(tmp_path):
    # a step longer than the heartbeat window (a big model) must not make a live run look dead
    run = progress(tmp_path / "r", **identity(), updated_at=time.time() - 10 * rundir.HEARTBEAT_S)
    assert rundir.arm_state(run) == "running"
    reused = progress(tmp_path / "s", **{**identity(), "pid_start": identity()["pid_start"] + 1})
    assert rundir.arm_state(reused) == "interrupted"  # same pid, another process


def test_a_zombie_is_not_running(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])  # exits, not reaped yet
    stat = Path(f"/proc/{p.pid}/stat")
    wait_for(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", timeout=60, what="a zombie")
    try:
        assert rundir.arm_state(progress(tmp_path / "r", pid=p.pid, host=HOST)) == "interrupted"
    finally:
        p.wait()


def test_another_hosts_run_is_judged_by_its_heartbeat(tmp_path):
    fresh = progress(tmp_path / "a", pid=1, host="some-other-node")
    stale = progress(tmp_path / "b", pid=1, host="some-other-node", updated_at=time.time() - rundir.HEARTBEAT_S - 1)
    assert rundir.arm_state(fresh) == "running" and rundir.arm_state(stale) == "interrupted"


@pytest.fixture
def held_lock(tmp_path):
    """The run's lock, held through another open file (as another process would hold it)."""
    run = tmp_path / "r"
    run.mkdir()
    fd = os.open(run / ".lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    yield run
    os.close(fd)


def test_a_run_held_by_a_live_trainer_is_busy_at_once(held_lock):
    from scalerl.launch.task import RunBusy, run_lock

    progress(held_lock, **identity())
    t0 = time.monotonic()
    with pytest.raises(RunBusy, match=f"pid {os.getpid()} on {HOST}"):
        with run_lock(held_lock, wait_s=60):
            pass
    assert time.monotonic() - t0 < 30


def test_a_run_whose_holder_never_says_who_it_is_is_busy_after_the_wait(held_lock):
    from scalerl.launch.task import RunBusy, run_lock

    with pytest.raises(RunBusy):
        with run_lock(held_lock, wait_s=0.5):
            pass


def test_marking_a_lost_arm_failed_never_overwrites_a_finished_or_live_run(tmp_path):
    done = tmp_path / "done"
    done.mkdir()
    (done / "summary.json").write_text(json.dumps({"status": "done", "final_pass_rate": 0.7}))
    live = progress(tmp_path / "live", **identity())
    for run in (done, live):
        sweeping._mark_failed(sweeping.Arm(["loss=cispo"], run, "running"), "RuntimeError('lock held')")
    assert json.loads((done / "summary.json").read_text())["status"] == "done"
    assert not (live / "summary.json").exists()
    dead = progress(tmp_path / "dead", pid=dead_pid(), host=HOST)
    sweeping._mark_failed(sweeping.Arm(["loss=cispo"], dead, "interrupted"), "killed")
    assert json.loads((dead / "summary.json").read_text())["status"] == "failed"
