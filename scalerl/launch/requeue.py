"""Requeue a preempted SLURM job so that the preemption itself cannot stop it.

Preemption sends SIGTERM to every process of the job step, then USR2 (submitit's
``--signal``). The signals travel separately through slurmctld and slurmstepd,
so under load the SIGTERM can land after the USR2 handler has started
``scontrol requeue``: scontrol, a child with the default SIGTERM action, dies,
submitit's ``check_call`` raises inside the handler, the job ends as failed and
the arm is lost. (Requeueing a running job also makes SLURM signal the job's
processes, the requeue command among them.)

``requeue`` runs scontrol with SIGTERM ignored (an ignored signal stays ignored
across exec, and scontrol installs no handler of its own), retries transient
failures with a bounded backoff, and before retrying asks slurmctld whether the
previous attempt already went through, so a job is requeued once.
``harden_submitit`` makes submitit's SLURM job environment requeue this way;
the scalerl launchers call it at the start of every job.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

REQUEUED_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING")


def _ignore_sigterm() -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def job_state(job_id: str, timeout: float = 30) -> tuple[str, int]:
    """(JobState, Restarts) of a job as slurmctld sees it; ("", -1) if it cannot be read."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             timeout=timeout, preexec_fn=_ignore_sigterm)
    except (OSError, subprocess.SubprocessError):
        return "", -1
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    try:
        restarts = int(fields.get("Restarts", "-1"))
    except ValueError:
        restarts = -1
    return fields.get("JobState", ""), restarts


def requeue(job_id: str, *, attempts: int = 6, timeout: float = 60, restarts: int | None = None, log=print) -> None:
    """``scontrol requeue job_id``, surviving SIGTERM and transient errors; raises if it cannot.

    ``restarts``: the job's restart count when it started (``SLURM_RESTART_COUNT``); a
    larger count, or a pending/requeued state, means an earlier attempt got through.
    """
    if restarts is None:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    error = ""
    for attempt in range(attempts):
        try:
            proc = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=timeout,
                                  preexec_fn=_ignore_sigterm)
            if proc.returncode == 0:
                return
            error = (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}"
        except (OSError, subprocess.SubprocessError) as e:
            error = f"{type(e).__name__}: {e}"
        state, count = job_state(job_id)
        if state.startswith(REQUEUED_STATES) or count > restarts:
            return  # the failed-looking attempt did reach slurmctld
        log(f"[scalerl] requeue of job {job_id} failed ({error}); retrying ({attempt + 1}/{attempts})")
        time.sleep(min(2.0**attempt, 10.0))
    raise RuntimeError(f"could not requeue SLURM job {job_id} after {attempts} attempts: {error}")


def harden_submitit() -> None:
    """Make submitit's SLURM jobs requeue with ``requeue`` (idempotent; call it in the job)."""
    from submitit.core import logger
    from submitit.slurm.slurm import SlurmJobEnvironment

    def _requeue(self, countdown: int) -> None:
        requeue(self.job_id, log=logger.get_logger().warning)
        logger.get_logger().info(f"Requeued job {self.job_id} ({countdown} remaining timeouts)")

    SlurmJobEnvironment._requeue = _requeue
