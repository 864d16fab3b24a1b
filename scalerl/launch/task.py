"""The Hydra task function: one arm = one run directory.

Validates the config, skips a finished run, resumes an unfinished one, and
records the outcome in ``summary.json`` (done or failed, with the error and
where the log is), so the sweeper and the analysis can trust the directory.
A run that another live process is training (a second sweep on the same
directory) is left to that process: this job returns ``status: busy`` and
writes nothing into the run directory.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import submitit
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from scalerl.config import ConfigError, validate
from scalerl.core.jsonio import JsonlFile, RecordError, read_json, write_json_atomic, write_text_atomic
from scalerl.core.liveness import identity, process_alive
from scalerl.launch import rundir
from scalerl.launch.cost_plan import ESTIMATE_FILE, spent
from scalerl.launch.inputs import check_machine
from scalerl.launch.roles import run_generator_node, slurm_role
from scalerl.models.extensions import diagnose_broken_extensions
from scalerl.registry import async_node
from scalerl.train.signals import STOP_REQUEST, exit_code, received_signal

LOCK_WAIT_S = 60.0
"""How long a job waits on a locked run whose holder is not (or not yet) recorded as training it."""
GENERATOR_NODE_WAIT_S = 1800.0
"""How long a generator node waits for its trainer's start-up (a warm start, loading the model)
before async.timeout_s applies (roles.py)."""


class RunBusy(RuntimeError):
    """Another live process is training this run."""

    def __init__(self, holder: dict):
        self.holder = holder
        super().__init__(f"being trained by pid {holder.get('pid')} on {holder.get('host')}")


def launch_rank() -> int:
    return int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)


@contextmanager
def run_lock(run_dir: Path, wait_s: float = LOCK_WAIT_S):
    """Exclusive per-run lock: two processes can never train the same run.

    A held lock whose holder ``progress.json`` names as training (``rundir.owner_alive``)
    raises ``RunBusy`` at once. Otherwise the holder is finishing (a stopped run that has
    not exited yet) or has not yet written its record, and we wait up to ``wait_s``.
    """
    fd = os.open(run_dir / ".lock", os.O_CREAT | os.O_RDWR)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = read_json(run_dir / "progress.json") or {}
                if rundir.owner_alive(holder) or time.monotonic() > deadline:
                    raise RunBusy(holder) from None
                time.sleep(0.2)
    except BaseException:
        os.close(fd)
        raise
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


def _discard_if_empty(run_dir: Path) -> None:
    """Remove the run directory Hydra made for a config that never ran (it holds only Hydra's own files)."""
    hydra = HydraConfig.get()
    own = {str(hydra.output_subdir), f"{hydra.job.name}.log"}
    if not run_dir.is_dir() or not {p.name for p in run_dir.iterdir()} <= own:
        return  # a real run lives here (an older run of this config): keep everything
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in (run_dir.parent, run_dir.parent.parent):  # outputs/runs, outputs: only if now empty
        try:
            parent.rmdir()
        except OSError:
            break


def _refuse(e: ConfigError) -> None:
    """One run: the message alone, exit 2. An arm of a sweep: raised, the sweeper reports it with the arm."""
    if HydraConfig.get().mode == RunMode.RUN:
        print(f"[scalerl] config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    raise e


def run_arm(cfg: DictConfig) -> dict:
    started = time.time()  # before the trainer's imports: a generator node's reference (roles.py)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        obj = validate(cfg)
        # The sandbox, the task files, model=hf's config.json, CUDA, vLLM, memory: as a --dry-run
        # checked them, before the run directory fills and the warm start runs.
        _, warnings = check_machine(obj, OmegaConf.select(HydraConfig.get(), "launcher", default=None))
        node = async_node(obj)
        role = slurm_role(node.generator_nodes, node.generators)  # SLURM node roles (roles.py)
    except ConfigError as e:
        if HydraConfig.get().mode == RunMode.RUN:  # no empty run directory left behind
            _discard_if_empty(run_dir)
        _refuse(e)
    if HydraConfig.get().mode == RunMode.RUN:  # a sweep's parent said these already
        for w in warnings:
            print(f"[scalerl] warning: {w}", file=sys.stderr)
    summary_path = run_dir / "summary.json"
    # A run directory belongs to one config (a pinned hydra.run.dir reused with other overrides):
    # refused before anything is written, or with --fresh the other run's files are moved aside.
    fresh = OmegaConf.select(HydraConfig.get(), "sweeper.reuse", default=True) is False
    foreign = rundir.foreign_run(run_dir, cfg)
    if foreign and not fresh:
        key = "hydra.run.dir" if HydraConfig.get().mode == RunMode.RUN else "hydra.sweep.dir"
        _refuse(ConfigError(key, foreign, f"give a new {key}, or add --fresh to move that run to "
                                          f"{rundir.aside_path(run_dir)} and start this one from step 0"))
    previous = {} if foreign else read_json(summary_path) or {}
    if previous.get("status") == "done":
        print(f"[scalerl] {run_dir.name} already finished; skipping (delete {summary_path} to rerun)")
        return previous
    if previous.get("status") == "stopped_early":
        print(f"[scalerl] {run_dir.name} was stopped early by its sweep; skipping "
              f"(delete {run_dir / STOP_REQUEST} and {summary_path} to resume it)")
        return previous
    meta = {
        "run_name": run_dir.name, "run_dir": str(run_dir), **rundir.summary_fields(cfg), "seed": obj.seed, "recipe": obj.recipe,
        "study": obj.study, "loss_clamp": obj.loss.clamp(),
    }
    # The trainer (torch, transformers) is imported only when an arm trains: --help,
    # --dry-run, --status and the sweep's parent process never pay its ~7 s import.
    with diagnose_broken_extensions():  # a torchvision built for another torch breaks transformers' imports
        from scalerl.train.loop import train

    if role.kind == "generator":
        return {**meta, **run_generator_node(role, GENERATOR_NODE_WAIT_S + node.timeout_s, summary_path,
                                             join_s=node.timeout_s, started=started)}
    if role.kind == "idle":
        return {**meta, "status": "idle"}
    if launch_rank() != 0:  # extra data-parallel ranks: no files, no lock
        return train(obj, run_dir, run_name=run_dir.name, group=obj.study, config_dict={})
    try:
        with run_lock(run_dir):
            result = _train_locked(cfg, obj, run_dir, meta, train, fresh=fresh)
    except RunBusy as busy:  # a second sweep on this directory: the first one owns this run
        print(f"[scalerl] {run_dir.name} is {busy}; leaving it to that process")
        return {**meta, "status": "busy", "holder": busy.holder}
    if result.get("status") == "interrupted" and HydraConfig.get().mode == RunMode.RUN:
        # a stopped run is not a finished one: 130 after Ctrl-C, 143 after SIGTERM (checkpoint saved)
        raise SystemExit(exit_code(received_signal()))
    return result


def _train_locked(cfg: DictConfig, obj, run_dir: Path, meta: dict, train, *, fresh: bool = False) -> dict:
    summary_path = run_dir / "summary.json"
    if fresh and rundir.foreign_run(run_dir, cfg):  # --fresh: the other config's run moves aside, whole
        hydra = HydraConfig.get()
        aside = rundir.move_aside(run_dir, keep={".lock", str(hydra.output_subdir), f"{hydra.job.name}.log"})
        print(f"[scalerl] --fresh: the run of another config in {run_dir} was moved to {aside}")
    # A checkpoint from another run (copied in, renamed) is refused before anything is written.
    from scalerl.train.checkpoint import check_checkpoints  # torch: already imported with the trainer

    try:
        check_checkpoints(run_dir, meta["run_identity"])
    except ConfigError as e:
        _refuse(e)
    # A corrupt row (half-written mid-file, out of order, non-finite) stops the resume before anything
    # is written or started, not after the warm start: the trainer would refuse it there anyway.
    for name in ("metrics.jsonl", "steps.jsonl"):
        try:
            JsonlFile(run_dir / name).rows()
        except RecordError as e:
            if HydraConfig.get().mode == RunMode.RUN:
                print(f"[scalerl] {e}", file=sys.stderr)
                raise SystemExit(2) from None
            raise
    if (read_json(summary_path) or {}).get("status") == "done":  # finished while we waited for the lock
        print(f"[scalerl] {run_dir.name} already finished; skipping (delete {summary_path} to rerun)")
        return read_json(summary_path)
    if (run_dir / STOP_REQUEST).exists() and not (run_dir / "metrics.jsonl").exists():
        # Stopped by its sweep before it started (a queued seed of an arm its rivals already beat,
        # launch/early_stop.race_order): nothing to train, so no warm start either.
        summary = {**meta, "status": "stopped_early", "step": 0, "compute": 0.0, "error": None,
                   "log": log_path(run_dir), "early_stop": read_json(run_dir / STOP_REQUEST)}
        write_json_atomic(summary_path, summary)
        print(f"[scalerl] {run_dir.name} was stopped by its sweep before it started: "
              f"{(summary['early_stop'] or {}).get('reason', '')}")
        return summary
    summary_path.unlink(missing_ok=True)
    _clean_temporaries(run_dir)
    # Say who trains this run before anything slow (the warm start): a second sweep, or --status, can now
    # tell a live run from a dead one by pid (rundir.owner_alive).
    progress = read_json(run_dir / "progress.json") or {}
    write_json_atomic(run_dir / "progress.json", {**progress, "status": "starting", "updated_at": time.time(),
                                                  **identity()})
    container = OmegaConf.to_container(cfg, resolve=True)
    t0 = time.time()
    try:
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(container))
        # the W&B run's config: the resolved config plus the run's identity (hashes, axes, clamp)
        result = train(obj, run_dir, run_name=run_dir.name, group=obj.study, config_dict={**container, **meta})
    except BaseException as e:
        if not isinstance(e, (KeyboardInterrupt, SystemExit)):
            _record_failure(summary_path, {**meta, "status": "failed", "error": f"{type(e).__name__}: {e}",
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
    cost = spent(run_dir / ESTIMATE_FILE, summary)  # the sweep's estimate beside what this run spent
    if cost is not None:
        summary["cost"] = cost
    if result["status"] == "stopped_early":  # why, against whom, and the fit at that moment
        summary["early_stop"] = read_json(run_dir / STOP_REQUEST)
        print(f"[scalerl] {run_dir.name} stopped early at step {result['step']}: "
              f"{(summary['early_stop'] or {}).get('reason', '')}")
    write_json_atomic(summary_path, summary)
    return summary


def _clean_temporaries(run_dir: Path) -> None:
    """Remove what a killed writer left: a checkpoint or JSONL rewrite cut short (only the lock
    holder, now us, writes those) and JSON files never renamed, if the pid in their name is dead."""
    for tmp in [*run_dir.glob(".*.tmp"), *(run_dir / "checkpoints").glob(".*.tmp")]:
        writer = tmp.name.rsplit(".", 2)[-2]
        if writer.isdigit() and process_alive(int(writer), socket.gethostname()) is not False:
            continue  # a launcher may be writing launch.json right now
        tmp.unlink(missing_ok=True)


def _record_failure(summary_path: Path, summary: dict) -> None:
    """Write the failed summary; on a disk too full even for that, say so and keep the original error."""
    try:
        write_json_atomic(summary_path, summary)
    except OSError as e:
        print(f"[scalerl] {e}; the run failed with {summary['error']}", file=sys.stderr)
