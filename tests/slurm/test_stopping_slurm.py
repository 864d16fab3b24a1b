"""Early stopping and Optuna pruning with arms that are SLURM jobs: the stop request reaches the
job through the run directory, the job ends `stopped_early`, and a relaunch submits nothing."""
from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml
from helpers import ANSWERS_ONLY, plant_leading_trial, popen_cli, read_rows, run_cli, wait_for

from scalerl.train.signals import STOP_REQUEST

# The answers-only shape: its warm start is the one the suite shares (the reasoning-shaped one costs minutes).
SLURM = ["hydra/launcher=slurm", "hydra.launcher.timeout_min=20", "logger=none", "train.threads=1", "async=sync",
         *ANSWERS_ONLY]


def test_an_early_stopped_slurm_arm_ends_stopped_early_and_is_not_resubmitted(slurm_cluster, tmp_path):
    study = tmp_path / "pair.yaml"
    study.write_text(yaml.safe_dump({"arms": [{"overrides": ["loss=cispo", "train.steps=4"]},
                                              {"overrides": ["loss=dapo", "train.steps=3000"]}]}))
    args = ["-m", f"sweep={study}", "study=pair", *SLURM, "train.eval_every=2", "hydra.sweeper.early_stop=true",
            "hydra.sweeper.poll_s=0.5"]
    proc = popen_cli(args, tmp_path, tmp_path / "sweep.log")
    sweep = tmp_path / "sweeps" / "pair"
    long_arm = lambda: next(sweep.glob("*loss=dapo*"), None)  # noqa: E731
    wait_for(lambda: long_arm() is not None and len(read_rows(long_arm() / "metrics.jsonl")) >= 2,
             timeout=300, what="2 evals of the long arm", proc=proc)
    # what the sweep's watcher writes for an arm that cannot catch the leader
    (long_arm() / STOP_REQUEST).write_text(json.dumps({"reason": "cannot catch cispo (test)", "basis": "A"}))
    assert proc.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-3000:]
    assert "early stopping on" in (tmp_path / "sweep.log").read_text()
    summary = json.loads((long_arm() / "summary.json").read_text())
    assert summary["status"] == "stopped_early" and summary["step"] < 3000
    assert summary["early_stop"]["reason"] == "cannot catch cispo (test)"
    submitted = lambda: len(list(tmp_path.glob("sweeps/*/.submitit/*")))  # noqa: E731 (job folders)
    before = submitted()
    assert before >= 1
    again = run_cli(args, tmp_path, timeout=300)
    assert "1 stopped early (not restarted)" in again.stdout
    assert submitted() == before


def test_optuna_trials_run_in_parallel_as_slurm_jobs_and_are_pruned(slurm_cluster, tmp_path):
    sweep = plant_leading_trial(tmp_path)  # a finished trial far ahead at every step
    args = ["-m", "hydra/sweeper=optuna", *SLURM, "train.lr=tag(log, interval(5e-5, 3e-4))", "train.steps=3000",
            "train.eval_every=2", "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=2", "hydra.sweeper.pruner=median",
            "+hydra.sweeper.pruner_kwargs.n_startup_trials=1", "hydra.sweeper.poll_s=0.5",
            "hydra.sweeper.study_name=planted"]
    out = run_cli(args, tmp_path, timeout=900).stdout
    trials = optuna.load_study(study_name="planted", storage=f"sqlite:///{sweep / 'optuna.db'}").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "PRUNED"]
    jobs = [json.loads((Path(t.user_attrs["run_dir"]) / "launch.json").read_text())["slurm_job_id"] for t in trials[1:]]
    assert len({j.split("_")[0] for j in jobs}) == 1 and sorted(j.split("_")[1] for j in jobs) == ["0", "1"]  # one array
    for t in trials[1:]:
        assert json.loads((Path(t.user_attrs["run_dir"]) / "summary.json").read_text())["status"] == "stopped_early"
    assert out.count("pruning trial") == 2
