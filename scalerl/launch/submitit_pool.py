"""Run a sweep's arms as submitit jobs (SLURM or submitit's local executor).

Waits for *every* job and turns a failed or cancelled one into a FAILED result
instead of abandoning the rest of the sweep, and records each arm's job id and
log in ``<run_dir>/launch.json``, so a relaunch never double-submits a queued
arm. Preemption and timeouts: submitit sends USR2, the run checkpoints at the
next step boundary and the job is requeued through the launcher's inherited
``checkpoint()``; the requeued job resumes from that checkpoint.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Sequence

import submitit
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from scalerl.launch.jobs import failed_return, write_launch_record
from scalerl.launch.rundir import sweep_run_dir

RELEASE_GRACE_S = 30.0


def submit_and_wait(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    kind = launcher._EXECUTOR
    params = dict(launcher.params)
    folder = params.pop("submitit_folder")
    init = {f"{kind}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
    executor = submitit.AutoExecutor(folder=folder, cluster=kind, **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"{kind}_{k}": v for k, v in params.items()})
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    args = [(list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
             Singleton.get_state()) for i, o in enumerate(job_overrides)]
    jobs = executor.map_array(launcher, *zip(*args))
    loader = launcher.hydra_context.config_loader
    configs = []
    for overrides, job in zip(job_overrides, jobs):
        cfg = loader.load_sweep_config(launcher.config, list(overrides))
        run_dir = sweep_run_dir(cfg)
        write_launch_record(run_dir, kind, overrides, log=str(job.paths.stdout), job_id=job.job_id)
        configs.append((cfg, run_dir))
        print(f"[scalerl] submitted {run_dir.name} as job {job.job_id} (log: {job.paths.stdout})")
    results = []
    for (cfg, run_dir), overrides, job in zip(configs, job_overrides, jobs):
        try:
            results.append(job.results()[0])
        except Exception as e:  # FailedJobError, UncompletedJobError (cancelled, killed), ...
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            error = RuntimeError(f"{type(e).__name__}: {first} (log: {job.paths.stdout})")
            results.append(failed_return(overrides, cfg, error, working_dir=str(run_dir)))
        if kind == "slurm":
            release(str(job.job_id))
    return results


def release(job_id: str, grace_s: float = RELEASE_GRACE_S) -> None:
    """Every task of the job has returned its result. A job SLURM still lists as running
    ``grace_s`` later is held by a step whose srun never heard some task's exit: a node that
    lost its link while the task ran (node roles, launch/roles.py). Nothing in it runs for the
    arm any more; cancel it, or a relaunch would leave the arm to that job until its time limit."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                                   timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return
        if state not in ("RUNNING", "COMPLETING"):
            return
        if time.monotonic() > deadline:
            if state == "RUNNING":
                print(f"[scalerl] job {job_id}: every task returned, but SLURM still runs it (a node lost its "
                      "link?); cancelling it", flush=True)
                subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            return
        time.sleep(1.0)
