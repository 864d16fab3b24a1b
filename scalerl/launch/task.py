"""The Hydra task function: one arm = one run directory.

Validates the config, skips a finished run, resumes an unfinished one, and
records the outcome in ``summary.json`` (done or failed, with the error and
where the log is), so the sweeper and the analysis can trust the directory.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import submitit
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from scalerl.config import ConfigError, validate
from scalerl.core.jsonio import JsonlFile, read_json, write_json_atomic
from scalerl.launch import rundir
from scalerl.train.signals import STOP_REQUEST


def launch_rank() -> int:
    return int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)


@contextmanager
def run_lock(run_dir: Path):
    """Exclusive per-run lock: two processes can never train the same run."""
    fd = os.open(run_dir / ".lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = read_json(run_dir / "progress.json") or {}
        raise RuntimeError(f"{run_dir} is already being trained (pid {holder.get('pid')} on {holder.get('host')})") from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def log_path(run_dir: Path) -> str | None:
    if (run_dir / "train.log").exists():
        return str(run_dir / "train.log")
    try:
        return str(submitit.JobEnvironment().paths.stdout)
    except Exception:  # not inside a submitit job
        return None


def run_arm(cfg: DictConfig) -> dict:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        obj = validate(cfg)
    except ConfigError as e:
        print(f"[scalerl] config error: {e}", file=sys.stderr)
        raise
    summary_path = run_dir / "summary.json"
    previous = read_json(summary_path) or {}
    if previous.get("status") == "done":
        print(f"[scalerl] {run_dir.name} already finished; skipping (delete {summary_path} to rerun)")
        return previous
    if previous.get("status") == "stopped_early":
        print(f"[scalerl] {run_dir.name} was stopped early by its sweep; skipping "
              f"(delete {run_dir / STOP_REQUEST} and {summary_path} to resume it)")
        return previous
    meta = {
        "run_name": run_dir.name, "run_dir": str(run_dir), "config_hash": rundir.config_hash(cfg),
        "arm_hash": rundir.arm_hash(cfg), "axes": rundir.axes(cfg), "seed": obj.seed, "recipe": obj.recipe,
        "study": obj.study, "loss_clamp": obj.loss.clamp(),
    }
    # The trainer (torch, transformers) is imported only when an arm trains: --help,
    # --dry-run, --status and the sweep's parent process never pay its ~7 s import.
    from scalerl.train.loop import train

    if launch_rank() != 0:  # extra data-parallel ranks: no files, no lock
        return train(obj, run_dir, run_name=run_dir.name, group=obj.study, config_dict={})
    with run_lock(run_dir):
        summary_path.unlink(missing_ok=True)
        container = OmegaConf.to_container(cfg, resolve=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(container))
        t0 = time.time()
        try:
            result = train(obj, run_dir, run_name=run_dir.name, group=obj.study, config_dict=container)
        except BaseException as e:
            if not isinstance(e, (KeyboardInterrupt, SystemExit)):
                write_json_atomic(summary_path, {**meta, "status": "failed", "error": f"{type(e).__name__}: {e}",
                                                 "traceback": traceback.format_exc()[-4000:], "log": log_path(run_dir)})
            raise
        if result["status"] not in ("done", "stopped_early"):
            print(f"[scalerl] {run_dir.name} stopped at step {result['step']} ({result['status']}); "
                  "relaunch the same command to resume")
            return {**meta, **result}
        rows = JsonlFile(run_dir / "metrics.jsonl").rows()
        rates = [r["pass_rate"] for r in rows if r.get("pass_rate") is not None]
        summary = {**meta, **result, "error": None, "log": log_path(run_dir), "elapsed_s": time.time() - t0,
                   "initial_pass_rate": rates[0] if rates else None,
                   "final_pass_rate": rates[-1] if rates else None, "best_pass_rate": max(rates) if rates else None}
        if result["status"] == "stopped_early":  # why, against whom, and the fit at that moment
            summary["early_stop"] = read_json(run_dir / STOP_REQUEST)
            print(f"[scalerl] {run_dir.name} stopped early at step {result['step']}: "
                  f"{(summary['early_stop'] or {}).get('reason', '')}")
        write_json_atomic(summary_path, summary)
        return summary
