"""What every launcher does for each job, written once: the launch record, the
result of a job that failed before it could report, the data-parallel world
size the launcher gives an arm, and which launchers scalerl offers."""
from __future__ import annotations

import time
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from scalerl.core.errors import ConfigError
from scalerl.core.jsonio import write_json_atomic
from scalerl.core.paths import conf_dir


def write_launch_record(run_dir: Path, launcher: str, overrides, log: str, job_id=None) -> None:
    """``<run_dir>/launch.json``: how the arm was launched, so a relaunch never double-submits it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "launch.json", {
        "launcher": launcher, "job_id": job_id, "slurm_job_id": job_id if launcher == "slurm" else None,
        "submitted_at": time.time(), "log": log, "overrides": list(overrides)})


def failed_return(overrides, cfg: DictConfig, error: BaseException, working_dir: str = "") -> JobReturn:
    """A FAILED JobReturn for a job that died (killed, cancelled, crashed) without returning one."""
    ret = JobReturn(overrides=list(overrides), cfg=cfg, hydra_cfg=cfg, working_dir=working_dir, task_name="",
                    status=JobStatus.FAILED)
    ret._return_value = error
    return ret


def launcher_world_size(cfg: DictConfig) -> int:
    """Data-parallel ranks per arm under the configured launcher (SLURM: tasks per node x the
    trainer nodes, which are all the job's nodes but ``async.generator_nodes``: launch/roles.py)."""
    launcher = OmegaConf.select(cfg, "hydra.launcher", default=None) or {}
    generator_nodes = int(OmegaConf.select(cfg, "async.generator_nodes", default=0) or 0)
    return int(launcher.get("tasks_per_node") or 1) * max(1, int(launcher.get("nodes") or 1) - generator_nodes)


def launchers() -> list[str]:
    """The launchers scalerl offers (``conf/hydra/launcher/*.yaml``): each carries scalerl's failure
    handling (every job waited for, a failed or cancelled one reported with its log, job ids
    kept in launch.json)."""
    return sorted(p.stem for p in (conf_dir() / "hydra" / "launcher").glob("*.yaml"))


def check_launcher(config: DictConfig) -> None:
    """Refuse a launcher without scalerl's failure handling: Hydra's own ``basic``, or
    hydra-submitit-launcher's ``submitit_slurm`` (its ``launch`` stops the sweep at the first
    failed job and records no job ids). scalerl's launchers are its plugin classes."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if not target.startswith("hydra_plugins.scalerl_plugins."):
        choice = (OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}).get("hydra/launcher", target)
        raise ConfigError("hydra/launcher", f"{choice!r} bypasses scalerl's failure handling; "
                          f"choose one of {launchers()} (e.g. hydra/launcher=slurm)")
