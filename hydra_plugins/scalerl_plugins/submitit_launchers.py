"""``hydra/launcher=submitit_local`` and ``hydra/launcher=slurm``.

hydra-submitit-launcher's classes, with a launch that survives failures: it
waits for *every* job, turns a failed or cancelled job into a FAILED result
instead of abandoning the rest of the sweep, and records each arm's job id
and log in ``<run_dir>/launch.json`` (so a relaunch never double-submits a
queued arm). Preemption/timeouts: submitit sends USR2, scalerl checkpoints at
the next step boundary and the job is requeued through the inherited
``checkpoint()``; the requeued job resumes from that checkpoint.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
from omegaconf import OmegaConf

from scalerl.train.records import write_json_atomic


class _WaitForAll:
    _EXECUTOR: str

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        init = {f"{self._EXECUTOR}_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
        executor = submitit.AutoExecutor(folder=folder, cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v for k, v in params.items()})
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        args = [(list(o), "hydra.sweep.dir", initial_job_idx + i, f"job_id_for_{initial_job_idx + i}",
                 Singleton.get_state()) for i, o in enumerate(job_overrides)]
        jobs = executor.map_array(self, *zip(*args))
        loader = self.hydra_context.config_loader
        run_dirs = []
        for overrides, job in zip(job_overrides, jobs):
            cfg = loader.load_sweep_config(self.config, list(overrides))
            run_dir = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
            run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(run_dir / "launch.json", {
                "launcher": self._EXECUTOR, "slurm_job_id": job.job_id if self._EXECUTOR == "slurm" else None,
                "job_id": job.job_id, "submitted_at": time.time(), "log": str(job.paths.stdout),
                "overrides": list(overrides)})
            run_dirs.append((cfg, run_dir))
            print(f"[scalerl] submitted {run_dir.name} as job {job.job_id} (log: {job.paths.stdout})")
        results = []
        for (cfg, run_dir), overrides, job in zip(run_dirs, job_overrides, jobs):
            try:
                results.append(job.results()[0])
            except Exception as e:  # FailedJobError, UncompletedJobError (cancelled, killed), ...
                ret = JobReturn(overrides=list(overrides), cfg=cfg, hydra_cfg=cfg, working_dir=str(run_dir),
                                task_name="", status=JobStatus.FAILED)
                ret._return_value = RuntimeError(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                                                 f" (log: {job.paths.stdout})")
                results.append(ret)
        return results


class ScalerlSubmititLocalLauncher(_WaitForAll, LocalLauncher):
    pass


class ScalerlSlurmLauncher(_WaitForAll, SlurmLauncher):
    pass
