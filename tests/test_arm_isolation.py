"""One arm's crash fails only that arm (scalerl/launch/local_pool.py).

A 2-arm sweep through the real entry point; one arm's process is killed with kill -9 while
both train. Its sibling runs on to the end and is ranked in leaderboard.csv, the killed arm
is marked failed with the signal as its reason, and a relaunch finishes it. (With a shared
ProcessPoolExecutor the dead worker broke the pool, which terminated the sibling at its next
step and failed it with BrokenProcessPool.)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import ANSWERS_ONLY, REPO, cli, wait_for

pytestmark = pytest.mark.slow

STEPS = 10
ARGS = ["-m", "loss=cispo,dapo", f"train.steps={STEPS}", "train.eval_every=2", "train.threads=1", "logger=none",
        "async=sync", "hydra.sweeper.n_boot=0", "study=isolation", *ANSWERS_ONLY]


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the arm's parent")
def test_a_killed_arm_fails_alone_and_a_relaunch_finishes_it(tmp_path):
    sweep = tmp_path / "sweeps" / "isolation"
    env = {**os.environ, "SCALERL_OUTPUT": str(tmp_path), "SCALERL_NO_BAR": "1"}
    log = tmp_path / "sweep.log"
    proc = subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *ARGS], cwd=REPO, env=env, start_new_session=True,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        def dirs() -> dict[str, Path]:
            return {p.name.split(",")[0]: p for p in sweep.glob("loss=*") if p.is_dir()}

        def both_training() -> bool:
            d = dirs()
            return len(d) == 2 and all(_json(p / "progress.json").get("step", 0) >= 1 for p in d.values())
        wait_for(both_training, timeout=300, what="both arms past step 1", proc=proc, detail=log.read_text)
        victim, sibling = dirs()["loss=cispo"], dirs()["loss=dapo"]
        pid = _json(victim / "progress.json")["pid"]
        # The arm's own process, forked by the sweep's forkserver (a child of the sweep), not a pool worker.
        assert _parent_of(_parent_of(pid)) == proc.pid
        assert _json(sibling / "progress.json").get("step", 0) < STEPS, "the sibling finished before the kill"
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=300) == 1, log.read_text()[-3000:]   # one arm failed: exit 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = log.read_text()
    assert "BrokenProcessPool" not in out
    assert _json(sibling / "summary.json").get("status") == "done", out[-3000:]
    assert [json.loads(r)["step"] for r in (sibling / "metrics.jsonl").read_text().splitlines()] == [0, 2, 4, 6, 8, 10]
    failed = _json(victim / "summary.json")
    assert failed.get("status") == "failed" and "SIGKILL" in failed.get("error", ""), failed
    board = pd.read_csv(sweep / "leaderboard.csv")
    ranked = board.set_index(board["run"].astype(str))
    assert ranked.loc[sibling.name, "run_status"] == "done" and ranked.loc[sibling.name, "rank"] == 1
    assert ranked.loc[victim.name, "run_status"] == "failed" and "SIGKILL" in ranked.loc[victim.name, "error"]

    again = cli(ARGS, tmp_path)                     # the relaunch finishes the killed arm only
    assert "launching 1 arm(s); 1 already done" in again.stdout, again.stdout[-3000:]
    assert _json(victim / "summary.json").get("status") == "done"
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert sorted(board["run"].astype(str)) == sorted([victim.name, sibling.name])
    assert set(board["run_status"]) == {"done"} and board["rank"].notna().all()   # both ranked (maybe tied)
