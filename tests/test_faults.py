"""Fault injection: kill -9 a run and a sweep's parent at many points, relaunch each time,
and get exactly what an uninterrupted run gets (metrics.jsonl, steps.jsonl, final weights).

The kill points come from the run's own progress, never from timers: a fail point
(``SCALERL_FAILPOINT=<point>@<step>``, see ``scalerl/launch/faults.py``) makes the process
SIGKILL itself at that instant (during the step-0 eval, in the middle of a checkpoint
save, right after one, with half a row written, ...), and the sweep's parent is also
killed from outside once its arms' records reach a chosen step. A second sweep started
on the same directory at the same time must neither train an arm twice nor mark the
other's arms failed; its arms, each trained once, are the sweep's uninterrupted reference.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import ANSWERS_ONLY, REPO, VOLATILE, ForkedCli, arms, popen_cli, read_rows, run_cli, wait_for

from scalerl.core.liveness import process_alive

pytestmark = pytest.mark.slow
# Synchronous: a pipeline_rl resume regenerates the batches in flight with newer weights, by
# design (docs/async.md), so only a sync run can be compared bit for bit after a kill.
RUN = ["train.steps=8", "train.eval_every=4", "train.ckpt_every=2", "train.threads=1", "logger=none", "async=sync",
       *ANSWERS_ONLY]  # a kill point does not depend on what a completion holds
SWEEP = ["-m", "loss=cispo,dapo", *RUN, "hydra.sweeper.n_boot=10", "study=default"]
KILLED = -signal.SIGKILL
# The order in which a run passes its fail points within one step (kill points are chosen in this order).
PHASES = ["steps.append", "steps.torn", "steps.appended", "eval", "metrics.append", "metrics.torn",
          "metrics.appended", "checkpoint.written", "checkpoint.saved"]
FIXED = [("eval", 0), ("metrics.torn", 0), ("metrics.appended", 0), ("checkpoint.written", 0),
         ("checkpoint.saved", 0), ("steps.appended", 1), ("checkpoint.written", 2), ("steps.torn", 3),
         ("eval", 4), ("metrics.torn", 4), ("checkpoint.saved", 4)]


def random_kill_points(seed: int = 15, n: int = 2) -> list[tuple[str, int]]:
    """n more kill points drawn from those the run passes after step 4's checkpoint and before step 8."""
    reachable = [(p, s) for s in (5, 6, 7) for p in ("steps.append", "steps.torn", "steps.appended")]
    reachable += [("checkpoint.written", 6), ("checkpoint.saved", 6)]
    return sorted(random.Random(seed).sample(reachable, n), key=lambda ps: (ps[1], PHASES.index(ps[0])))


def stable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def records(run_dir: Path) -> tuple[list[dict], list[dict]]:
    return stable(read_rows(run_dir / "metrics.jsonl")), stable(read_rows(run_dir / "steps.jsonl"))


def final_weights(run_dir: Path) -> dict:
    last = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    assert last.name == "step_00000008.pt"
    return torch.load(last, weights_only=True)["model"]


def assert_same_run(got: Path, ref: Path) -> None:
    assert json.loads((got / "summary.json").read_text())["status"] == "done"
    assert records(got) == records(ref)  # no eval or step lost or duplicated, bit-identical values
    a, b = final_weights(got), final_weights(ref)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not sorted(got.rglob("*.tmp")), sorted(got.rglob("*.tmp"))  # temporaries of killed writers cleaned


def only_dir(root: Path) -> Path:
    (d,) = [p for p in root.iterdir() if p.is_dir()]
    return d


# ---------------------------------------------------------------- one run, 14 kill points
def test_a_run_killed_at_14_points_ends_identical_to_an_uninterrupted_one(tmp_path):
    cli = ForkedCli()
    assert cli.run(RUN, tmp_path / "ref", tmp_path / "ref.log") == 0
    ref = only_dir(tmp_path / "ref" / "runs")
    kills = [f"{p}@{s}" for p, s in FIXED + random_kill_points()] + ["run.finished"]
    out = tmp_path / "out"
    for i, point in enumerate(kills):
        log = tmp_path / f"kill{i:02d}.log"
        assert cli.run(RUN, out, log, failpoint=point) == KILLED, f"not killed at {point}: {log.read_text()[-2000:]}"
    run_dir = only_dir(out / "runs")
    assert not (run_dir / "summary.json").exists()  # killed after training, before its summary
    assert cli.run(RUN, out, tmp_path / "last.log") == 0
    assert "resuming" in (tmp_path / "last.log").read_text()
    assert_same_run(run_dir, ref)
    assert len(kills) >= 10


# ---------------------------------------------------------------- sweeps
@pytest.fixture(scope="module")
def concurrent(tmp_path_factory) -> tuple[Path, list]:
    """The two-arm sweep, started twice at once on one directory (the issue's second terminal).

    Each arm is trained once, from scratch, by whichever sweep takes its lock first: it is
    also the uninterrupted reference the killed sweep is compared with.
    """
    out = tmp_path_factory.mktemp("concurrent")
    env = {**os.environ, "SCALERL_OUTPUT": str(out), "SCALERL_NO_BAR": "1"}
    args = [sys.executable, "-m", "scalerl.sweep", *SWEEP, "hydra.launcher.n_parallel=1"]
    procs = [subprocess.Popen(args, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    return out / "sweeps" / "default", [(p.returncode, o) for p, o in zip(procs, outs)]


# One xdist group for the tests on `concurrent`: a module fixture is per worker, so without it two
# workers each ran the two concurrent sweeps (100-165 s each in CI).
CONCURRENT = pytest.mark.xdist_group("faults_concurrent")


@CONCURRENT
def test_two_sweeps_on_one_directory_at_once_share_the_arms_and_both_succeed(concurrent):
    # The issue: the launch that lost an arm's lock wrote `failed` over the winner's summary,
    # the leaderboard read all run_failed and both commands exited 1.
    sweep, results = concurrent
    assert [rc for rc, _ in results] == [0, 0], "\n\n".join(o[-3000:] for _, o in results)
    logs = [(a / "train.log").read_text() for a in arms(sweep)]
    assert any("leaving it to that process" in t or "already finished" in t for t in logs)  # they did collide
    for a in arms(sweep):
        assert json.loads((a / "summary.json").read_text())["status"] == "done"
        assert [r["step"] for r in read_rows(a / "metrics.jsonl")] == [0, 4, 8]
        assert [r["step"] for r in read_rows(a / "steps.jsonl")] == list(range(1, 9))
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert len(board) == 2 and not board["status"].eq("run_failed").any()


def assert_same_sweep(sweep: Path, reference: Path) -> None:
    assert [a.name for a in arms(sweep)] == [a.name for a in arms(reference)]
    for got, ref in zip(arms(sweep), arms(reference)):
        assert_same_run(got, ref)
    cols = ["run", "status", "A", "B", "C_mid", "R0", "n_points"]
    board, ref_board = pd.read_csv(sweep / "leaderboard.csv"), pd.read_csv(reference / "leaderboard.csv")
    assert not board["status"].eq("run_failed").any()
    pd.testing.assert_frame_equal(board[cols], ref_board[cols])


def kill_parent_when(proc, condition, what: str) -> None:
    wait_for(condition, timeout=600, what=what, proc=proc)
    proc.kill()
    assert proc.wait(timeout=60) == KILLED


@CONCURRENT
def test_a_sweep_parent_killed_at_4_points_ends_identical_to_an_uninterrupted_one(tmp_path, concurrent):
    sweep = tmp_path / "sweeps" / "default"
    env = {"SCALERL_FAILPOINT": "sweep.launched"}  # 1) arms' launch records written, no arm started
    assert run_cli(SWEEP, tmp_path, check=False, extra_env=env).returncode == KILLED
    assert all((a / "launch.json").exists() and not (a / "metrics.jsonl").exists() for a in arms(sweep))

    # 2) every arm has its step-0 eval: the arms must stop with their parent, not run on as orphans
    proc = popen_cli(SWEEP, tmp_path, tmp_path / "2.log")
    kill_parent_when(proc, lambda: sweep.exists() and len(arms(sweep)) == 2 and all(
        read_rows(a / "metrics.jsonl") for a in arms(sweep)), "both arms' step-0 rows")
    behind = min(arms(sweep), key=lambda a: len(read_rows(a / "steps.jsonl")))  # at most a step into its 8
    pids = [json.loads((a / "progress.json").read_text())["pid"] for a in arms(sweep)]
    wait_for(lambda: not any(process_alive(pid, socket.gethostname()) for pid in pids), timeout=120,
             what="the orphaned arms to stop")
    assert json.loads((behind / "progress.json").read_text())["status"] == "interrupted"  # checkpointed, stopped
    assert not (behind / "summary.json").exists()  # (the other arm may have finished before the kill)

    # 3) mid-run, relaunched at once: an arm still finishing its step is waited for, then resumed
    proc = popen_cli(SWEEP, tmp_path, tmp_path / "3.log")
    first = arms(sweep)[0]
    kill_parent_when(proc, lambda: any(r["step"] >= 5 for r in read_rows(first / "steps.jsonl")), "step 5")

    # 4) every arm done, the leaderboard not yet written
    again = run_cli(SWEEP, tmp_path, check=False, extra_env={"SCALERL_FAILPOINT": "sweep.leaderboard"})
    assert again.returncode == KILLED, again.stdout[-3000:]
    assert all(json.loads((a / "summary.json").read_text())["status"] == "done" for a in arms(sweep))

    last = run_cli(SWEEP, tmp_path)  # was: "already running elsewhere", 0 arms launched, a stale leaderboard
    assert "launching 0 arm(s); 2 already done" in last.stdout
    assert_same_sweep(sweep, concurrent[0])
