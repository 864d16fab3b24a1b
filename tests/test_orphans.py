"""Children die with their parent, whatever the moment (issue 29 point 7).

* A trainer killed with kill -9 while its generators start up: the generators go too
  (at a01f570 one waited out two 300 s store timeouts, ~10 min).
* A sweep killed in its leaderboard phase: no pool worker, and no resource_tracker, is
  left (at a01f570 an idle worker lived on for 23 min).
Every process runs in a session of its own, so what is left is exactly the processes of
that session; each check allows 10 s after the kill.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import REPO

GRACE_S = 10.0


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is ``sid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # after "pid (comm) "
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def assert_session_empties(sid: int) -> None:
    left = []

    def empty():
        left[:] = session_members(sid)
        return not left
    try:
        wait_until(empty, GRACE_S, "the session to empty")
    finally:
        for pid in session_members(sid):     # never leave them to the next test
            os.kill(pid, signal.SIGKILL)
    assert not left, left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_generator_dies_with_a_trainer_killed_while_it_starts(tmp_path):
    pid_file = tmp_path / "generator.pid"
    # the trainer's side of GeneratorPool.start: spawn the generator, then wait for it to connect
    trainer = textwrap.dedent(f"""
        import sys, time
        from scalerl.generation.fleet.pool import spawn_child
        spawn_child([sys.executable, "-c", "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
                     " time.sleep(600)"], env={{}})
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", trainer], cwd=REPO, start_new_session=True)
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), 120, "the generator to start")
    finally:
        proc.kill()
        proc.wait()
    assert_session_empties(proc.pid)


@pytest.mark.slow
def test_a_sweep_killed_in_its_leaderboard_phase_leaves_no_process(tmp_path):
    env = {**os.environ, "SCALERL_OUTPUT": str(tmp_path), "SCALERL_NO_BAR": "1",
           "SCALERL_FAILPOINT": "sweep.leaderboard"}
    args = ["-m", "loss=cispo", "train.steps=2", "train.eval_every=2", "train.threads=1", "logger=none",
            "async=sync", "hydra.sweeper.n_boot=0", "study=orphans"]
    proc = subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                            start_new_session=True, stdout=open(tmp_path / "sweep.log", "w"),
                            stderr=subprocess.STDOUT)
    try:
        assert proc.wait(timeout=600) == -signal.SIGKILL, (tmp_path / "sweep.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_session_empties(proc.pid)
