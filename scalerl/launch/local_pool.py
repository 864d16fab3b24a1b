"""Run a sweep's arms in parallel processes on this machine.

Each arm gets a fresh spawned process with ``threads_per_arm`` torch threads
(on a 2-core CPU, two 1-thread processes match one 2-thread process, and a
fixed thread count keeps each arm reproducible; docs/embedded.md). An arm with
generator processes (``async.generators``, e.g. pipeline_rl) shares its
threads among them and gets at least one per process (``max(threads_per_arm, 1 + generators)``),
but is packed onto cores by ``threads_per_arm`` alone: its sides wait on each other. Its output goes to
``<run_dir>/train.log``; the parent shows one live table for all arms.
Ctrl-C reaches every arm, which checkpoints and stops; relaunch to resume.

Arms die with their parent: killing the sweep (even ``kill -9``) is how people stop
it, and an orphaned arm would train on unseen, hold its run's lock and leave a stale
leaderboard. Each arm watches its parent and, once it is gone, stops the way Ctrl-C
stops it: a checkpoint at the next step boundary, nothing lost. A relaunch that finds
an arm still finishing that step waits for it (``sweeping.run_sweep`` adopts live arms).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from omegaconf import open_dict
from rich.live import Live
from rich.table import Table

from scalerl.core.faults import failpoint
from scalerl.core.jsonio import read_json
from scalerl.launch.app import register
from scalerl.launch.jobs import failed_return, write_launch_record
from scalerl.launch.rundir import sweep_run_dir
from scalerl.registry import async_node

PARENT_POLL_S = 1.0


def _die_with_parent(parent: int) -> None:
    """SIGTERM this pool worker once its sweep process is gone: an arm then checkpoints and stops,
    as on Ctrl-C; an idle worker simply exits.

    Polls the parent pid (portable, unlike Linux's PR_SET_PDEATHSIG, which also fires when the
    executor thread that spawned the worker exits).
    """
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="scalerl-parent-watch", daemon=True).start()


def _child(blob: bytes) -> bytes:
    """Runs in the spawned process: one Hydra job, output to train.log.

    The process already watches its parent (the pool's initializer, ``_die_with_parent``)."""
    hydra_context, task_function, sweep_config, singleton_state, threads, parent = cloudpickle.loads(blob)
    register()  # the ${scalerl_run_name:} resolver, before anything resolves
    os.environ["SCALERL_NUM_THREADS"] = str(threads)
    os.environ["SCALERL_NO_BAR"] = "1"
    run_dir = sweep_run_dir(sweep_config)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "train.log", "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout, sys.stderr = log, log
    Singleton.set_state(singleton_state)
    setup_globals()
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status == JobStatus.FAILED:  # exceptions may not pickle; keep type, message and traceback
        exc = ret._return_value
        tb = "".join(traceback.format_exception(exc))
        print(tb, flush=True)
        ret._return_value = RuntimeError(f"{type(exc).__name__}: {exc}")
    return cloudpickle.dumps(ret)


def auto_parallel(n_arms: int, threads_per_arm: int) -> int:
    """Arms to run at once: one per core-slot, but when the arms barely outnumber
    the slots (3 arms, 2 cores) run them all, so no core idles through a last
    lone arm (1.5x instead of 2x the single-arm time)."""
    slots = max(1, (os.cpu_count() or 1) // max(threads_per_arm, 1))
    return n_arms if n_arms <= slots * 3 // 2 else slots


def arm_threads(cfg, threads_per_arm: int) -> int:
    """Threads one arm runs on: its trainer plus its generator processes, at least one each."""
    return max(threads_per_arm, 1 + int(async_node(cfg).generators))


def run_parallel(launcher, job_overrides, initial_job_idx: int) -> list[JobReturn]:
    setup_globals()
    loader = launcher.hydra_context.config_loader
    jobs = []
    for i, overrides in enumerate(job_overrides):
        cfg = loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = f"local_{initial_job_idx + i}"
            cfg.hydra.job.num = initial_job_idx + i
        jobs.append((list(overrides), cfg))
        run_dir = sweep_run_dir(cfg)
        write_launch_record(run_dir, "local", overrides, log=str(run_dir / "train.log"))
    threads = [arm_threads(cfg, launcher.threads_per_arm) for _, cfg in jobs]
    # Packed by the launcher's per-arm budget, not by an arm's processes: the trainer and the
    # generators of a pipeline arm wait on each other (trainer_idle_frac, generator_idle_frac), and
    # a waiting side sleeps, so arms side by side keep the cores busy where one alone leaves a share
    # idle. Packed by processes instead, three pipeline arms on 2 cores would run one or two at a
    # time; packed this way the sweep still takes 1.28x a sync sweep's seconds per arm (the
    # cause not yet profiled; benchmarks/RESULTS.md, 2026-12-02).
    workers = launcher.n_parallel or auto_parallel(len(jobs), launcher.threads_per_arm)
    workers = max(1, min(workers, len(jobs)))
    print(f"[scalerl] running {len(jobs)} arm(s), {workers} at a time, {'/'.join(map(str, sorted(set(threads))))} "
          f"thread(s) each; logs in <run dir>/train.log", flush=True)
    failpoint("sweep.launched")  # crash tests: launch records written, no arm started
    state = Singleton.get_state()
    ctx = mp.get_context("spawn")
    results: list[JobReturn | None] = [None] * len(jobs)
    interrupted = False
    # Every worker watches its parent from the moment it starts, not only while it runs an arm: with
    # max_tasks_per_child=1 the pool spawns a fresh idle worker as each arm ends, and a sweep killed
    # after that (during the leaderboard) would leave it, and the resource_tracker it keeps alive.
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, max_tasks_per_child=1,
                                initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_child, cloudpickle.dumps((launcher.hydra_context, launcher.task_function, cfg, state,
                                                          threads[k], os.getpid()))): k
                   for k, (_, cfg) in enumerate(jobs)}
        try:
            _watch(futures, [sweep_run_dir(cfg) for _, cfg in jobs])
        except KeyboardInterrupt:
            print("\n[scalerl] interrupted: arms are checkpointing; relaunch the same command to resume", flush=True)
            cf.wait(futures, timeout=120)
            interrupted = True
        for fut, k in futures.items():
            try:
                results[k] = cloudpickle.loads(fut.result(timeout=0))
            except BaseException as e:  # crashed process, killed, interrupted
                results[k] = failed_return(jobs[k][0], jobs[k][1], e)
    if interrupted:  # a stopped sweep is not a finished one: no leaderboard of half-trained arms, exit 130
        raise SystemExit(128 + signal.SIGINT)
    return results


def _watch(futures: dict, run_dirs: list[Path]) -> None:
    """Block until every arm ends, showing a live progress table."""
    pending = set(futures)
    if sys.stdout.isatty():
        with Live(_table(run_dirs), refresh_per_second=1) as live:
            while pending:
                _, pending = cf.wait(pending, timeout=1.0)
                live.update(_table(run_dirs))
        return
    # Without a terminal (train.log, CI): an arm's line when it changed, else every 2 minutes with
    # how long its phase has lasted, so that no line repeats unchanged for minutes.
    shown: dict[Path, tuple[str, float]] = {}
    while pending:
        _, pending = cf.wait(pending, timeout=1.0)
        for d in run_dirs:
            p = read_json(d / "progress.json") or {}
            pr = p.get("pass_rate")
            line = (f"{_status(p, time.time(), elapsed=False)} step {p.get('step', 0)}/{p.get('total', '?')}"
                    f" pass_rate {'-' if pr is None else f'{pr:.3f}'}")
            last = shown.get(d)
            if last is None or last[0] != line or time.time() - last[1] > 120 or not pending:
                shown[d] = (line, time.time())
                print(f"[scalerl] {d.name}: {_status(p, time.time())} step {p.get('step', 0)}/{p.get('total', '?')}"
                      f" pass_rate {'-' if pr is None else f'{pr:.3f}'}", flush=True)


def _status(p: dict, now: float, elapsed: bool = True) -> str:
    """The status column: for a starting arm, the phase it announced (``train/progress.announce``)
    and for how long it has lasted."""
    status = p.get("status", "waiting")
    if status != "starting" or not p.get("phase"):
        return status
    return f"{p['phase']} ({now - p.get('phase_since', now):.0f}s)" if elapsed else p["phase"]


def _table(run_dirs: list[Path]):
    t = Table(title="scalerl arms")
    for col in ("arm", "status", "step", "pass rate", "eta"):
        t.add_column(col)
    for d in run_dirs:
        p = read_json(d / "progress.json") or {}
        pr, eta = p.get("pass_rate"), p.get("eta_s")
        t.add_row(d.name, _status(p, time.time()), f"{p.get('step', 0)}/{p.get('total', '?')}",
                  "-" if pr is None else f"{pr:.3f}", "-" if eta is None else f"{eta / 60:.1f} min")
    return t
