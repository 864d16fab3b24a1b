"""scalerl sweeps on the real local SLURM cluster (not a mock): job arrays,
preemption with resume, cancelled arms, relaunches and a 2-task gloo arm."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
from helpers import ANSWERS_ONLY, arms, popen_cli, read_rows, run_cli, wait_for

from scalerl.config import compose, validate
from scalerl.train.loop import train

# The answers-only shape: arrays, requeues and cancellations do not depend on what a completion holds
# (the reasoning-shaped warm start alone took 240 s of this file on CI's machine)
SLURM = ["hydra/launcher=slurm", "hydra.launcher.timeout_min=20", "logger=none", "train.threads=1", "study=default",
         *ANSWERS_ONLY]



def launch(run_dir: Path) -> dict:
    return json.loads((run_dir / "launch.json").read_text())


def sacct(job: str, fmt: str = "State") -> list[str]:
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job, "-o", fmt], capture_output=True, text=True, timeout=20)
    return [line for line in out.stdout.splitlines() if line.strip()]


def test_three_arm_sweep_runs_as_an_array_and_relaunch_launches_nothing(slurm_cluster, tmp_path):
    args = ["-m", "loss=cispo,dapo,gspo", *SLURM, "train.steps=4", "train.eval_every=2"]
    run_cli(args, tmp_path, timeout=600)
    sweep = tmp_path / "sweeps" / "default"
    runs = arms(sweep)
    assert len(runs) == 3
    job_ids = [launch(r)["slurm_job_id"] for r in runs]
    array_ids = {j.split("_")[0] for j in job_ids}
    assert len(array_ids) == 1 and sorted(j.split("_")[1] for j in job_ids) == ["0", "1", "2"]  # one array
    for r in runs:
        assert json.loads((r / "summary.json").read_text())["status"] == "done"
        assert [m["step"] for m in read_rows(r / "metrics.jsonl")] == [0, 2, 4]
    wait_for(lambda: all(sacct(j) == ["COMPLETED"] for j in job_ids), timeout=60, what="sacct COMPLETED")
    assert len(pd.read_csv(sweep / "leaderboard.csv")) == 3
    submitted = len(list((sweep / ".submitit").iterdir()))
    again = run_cli(args, tmp_path, timeout=300)
    assert "launching 0 arm(s); 3 already done" in again.stdout
    assert len(list((sweep / ".submitit").iterdir())) == submitted  # nothing submitted


def test_preempted_arm_resumes_from_its_checkpoint_with_continuous_metrics(slurm_cluster, tmp_path):
    args = ["-m", "loss=cispo", *SLURM, "train.steps=40", "train.eval_every=5"]
    proc = popen_cli(args, tmp_path, tmp_path / "sweep.log")
    sweep = tmp_path / "sweeps" / "default"
    wait_for(lambda: sweep.exists() and arms(sweep) and len(read_rows(arms(sweep)[0] / "metrics.jsonl")) >= 2,
             timeout=300, what="two eval rows", proc=proc)
    run_dir = arms(sweep)[0]
    job = launch(run_dir)["slurm_job_id"]
    # What SLURM preemption looks like to the job (submitit's own test hook): SIGTERM, then USR2.
    subprocess.run(["scancel", job, "--signal", "SIGTERM"], check=True)
    subprocess.run(["scancel", job, "--signal", "USR2"], check=True)
    assert proc.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
    rows = read_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(0, 41, 5))  # no lost, no duplicated point
    assert all(a["compute"] < b["compute"] for a, b in zip(rows, rows[1:]))
    out = "".join(p.read_text(errors="replace") for p in (sweep / ".submitit").rglob("*_log.out"))
    assert "resuming" in out  # the requeued job picked up the checkpoint
    history = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "State"], capture_output=True,
                             text=True, timeout=20).stdout.split()
    assert "REQUEUED" in history and history[-1] == "COMPLETED", history  # it really was requeued


def test_cancelled_arm_is_failed_while_others_finish_then_only_it_reruns(slurm_cluster, tmp_path):
    args = ["-m", "loss=cispo,dapo", *SLURM, "train.steps=40", "train.eval_every=5"]
    proc = popen_cli(args, tmp_path, tmp_path / "sweep.log")
    sweep = tmp_path / "sweeps" / "default"
    wait_for(lambda: sweep.exists() and len(arms(sweep)) == 2 and all((r / "launch.json").exists() for r in arms(sweep))
             and (arms(sweep)[1] / "metrics.jsonl").exists(), timeout=300, what="both arms started", proc=proc)
    victim, survivor = arms(sweep)[1], arms(sweep)[0]
    subprocess.run(["scancel", launch(victim)["slurm_job_id"]], check=True)
    assert proc.wait(timeout=600) == 1
    text = (tmp_path / "sweep.log").read_text()
    assert f"FAILED {victim.name}" in text and "log:" in text
    assert json.loads((survivor / "summary.json").read_text())["status"] == "done"
    assert json.loads((victim / "summary.json").read_text())["status"] == "failed"
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert (board["status"] == "run_failed").sum() == 1
    again = run_cli(args, tmp_path, timeout=600)
    assert "launching 1 arm(s); 1 already done" in again.stdout
    assert json.loads((victim / "summary.json").read_text())["status"] == "done"
    assert [r["step"] for r in read_rows(victim / "metrics.jsonl")] == list(range(0, 41, 5))


def test_two_task_arm_trains_with_gloo_across_slurm_tasks(slurm_cluster, tmp_path):
    """srun's 2 tasks form one FSDP2 run over gloo that reproduces the same run on 1 rank.
    Generator processes serve one trainer rank for now: the data-parallel arm runs synchronously."""
    args = ["-m", "loss=cispo", *SLURM, "hydra.launcher.tasks_per_node=2", "train.steps=4", "train.eval_every=2",
            "async=sync"]
    run_cli(args, tmp_path, timeout=600)
    (run_dir,) = arms(tmp_path / "sweeps" / "default")
    derived = json.loads((run_dir / "derived.json").read_text())
    prompts = validate(compose(["loss=cispo"])).batch.prompts   # the default batch, split over 2 ranks
    assert derived["world_size"] == 2 and derived["prompts_per_rank"] == prompts // 2
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [0, 2, 4]
    assert (run_dir / "checkpoints" / "step_00000004" / ".metadata").exists()  # sharded checkpoints
    one = tmp_path / "one_rank"
    train(validate(compose(["loss=cispo", "logger=none", "train.threads=1", "train.steps=4", "train.eval_every=2",
                            "async=sync", *ANSWERS_ONLY])),
          one, run_name="one", group="test", config_dict={})
    same = ("train_reward", "effective_batch", "response_length")
    assert [{k: r[k] for k in same} for r in read_rows(run_dir / "steps.jsonl")] == \
        [{k: r[k] for k in same} for r in read_rows(one / "steps.jsonl")]
    assert [r["pass_rate"] for r in read_rows(run_dir / "metrics.jsonl")] == \
        [r["pass_rate"] for r in read_rows(one / "metrics.jsonl")]
    logs = sorted((tmp_path / "sweeps" / "default" / ".submitit").rglob("*_log.out"))
    assert {p.name.split("_")[-2] for p in logs} == {"0", "1"}  # <job>_<task>_log.out: one per task
    assert json.loads((run_dir / "summary.json").read_text())["device_hours"] > 0
