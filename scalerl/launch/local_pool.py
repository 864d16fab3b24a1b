"""Run a sweep's arms in parallel processes on this machine.

Each arm gets a fresh process with ``threads_per_arm`` torch threads
(on a 2-core CPU, two 1-thread processes match one 2-thread process, and a
fixed thread count keeps each arm reproducible; docs/embedded.md). An arm with
generator processes (``async.generators``, e.g. pipeline_rl) shares its
threads among them and gets at least one per process (``max(threads_per_arm, 1 + generators)``),
but is packed onto cores by ``threads_per_arm`` alone: its sides wait on each other. Its output goes to
``<run_dir>/train.log``; the parent shows one live table for all arms.
Ctrl-C reaches every arm, which checkpoints and stops; relaunch to resume.

Arms are forked from one server process per sweep (multiprocessing's forkserver) that has imported
torch and the trainer once (``ARM_PRELOAD``): a spawned arm spent about 3.6 s of CPU
on those imports before its first step, once per arm and per relaunch. The server forks each arm
before any torch thread exists, ignores Ctrl-C itself, and exits once the sweep and its arms are gone.

Arms die with their sweep: killing the sweep (even ``kill -9``) is how people stop
it, and an orphaned arm would train on unseen, hold its run's lock and leave a stale
leaderboard. Each arm watches the sweep process and, once it is gone, stops the way Ctrl-C
stops it: a checkpoint at the next step boundary, nothing lost. A relaunch that finds
an arm still finishing that step waits for it (``sweeping.run_sweep`` adopts live arms).

Arms are isolated from each other: each runs in a process of its own, started for it and
waited for on its own, not in a shared worker pool (a ``ProcessPoolExecutor`` breaks as a
whole when one worker dies, and terminates every sibling with ``BrokenProcessPool``). An arm
whose process dies (``kill -9``, out of memory) is failed alone, with the signal as its
reason; its siblings run on and are ranked, and a relaunch resumes it from its checkpoint.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import select
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait as wait_ready
from pathlib import Path

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from omegaconf import open_dict
from rich.live import Live
from rich.table import Table

from scalerl.core.jsonio import read_json
from scalerl.launch import gpus as gpu_shares
from scalerl.launch.packing import auto_parallel
from scalerl.launch.app import register
from scalerl.launch.jobs import failed_return, write_launch_record
from scalerl.launch.rundir import sweep_run_dir
from scalerl.registry import async_node
from scalerl.train.signals import exit_code, signal_of

# What the forkserver imports once per sweep: the trainer. Not transformers nor torch._dynamo (about
# 2 CPU-s): an embedded arm imports neither (its tokenizer is read without transformers,
# models/tokenizer.py; its CPU optimizer skips torch's dynamo guard, train/optimizer.py), and a
# model=hf arm imports them on first use, seconds in a run of hours.
ARM_PRELOAD = ["scalerl.launch.app", "scalerl.train.loop"]
SWEEP_POLL_S = 1.0
STOP_WAIT_S = 120.0  # after Ctrl-C, how long the arms get to checkpoint before they are terminated
EXIT_WAIT_S = 60.0   # how long an arm's process may linger after it sent its result


def _die_with_sweep(conn, replied: threading.Event) -> None:
    """SIGTERM this arm's process once its sweep process is gone: the arm then checkpoints and
    stops, as on Ctrl-C.

    Watches the arm's end of its result pipe, whose other end only the sweep process holds: the
    kernel flags a pipe's write end (POLLERR) once every reader is closed, which a killed sweep's
    are at once. Not the parent pid: the parent is the sweep's forkserver, which lives on while
    any arm does (each holds its end of the server's own liveness pipe). Nor Linux's
    PR_SET_PDEATHSIG, which fires when the parent *thread* that forked the process exits.
    ``replied``: set once the arm has sent its result, after which the sweep may close its end.
    """
    def watch() -> None:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLERR)
        gone = select.POLLERR | select.POLLHUP | select.POLLNVAL  # NVAL: the arm closed it after replying
        while not any(ev & gone for _, ev in poller.poll(SWEEP_POLL_S * 1000)):
            pass
        if not replied.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="scalerl-sweep-watch", daemon=True).start()


def _arm_process(blob: bytes, conn, gpus: list[str] | None = None) -> None:
    """Target of an arm's process: watch the sweep from the first moment, run the arm, send
    its pickled JobReturn back (or why it could not run), and exit."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the forkserver ignores Ctrl-C; an arm takes it,
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # unblocked (arm_context blocked it for the server)
    replied = threading.Event()
    _die_with_sweep(conn, replied)
    try:
        reply = (True, _child(blob, gpus))
    except KeyboardInterrupt:  # Ctrl-C before the run took over its signals (start-up): the sweep says it
        reply = (False, "interrupted while it started; relaunch the sweep to resume it")
    except BaseException as e:  # noqa: BLE001 - any failure is the arm's alone, reported to the parent
        traceback.print_exc()
        reply = (False, f"{type(e).__name__}: {e}")
    replied.set()
    try:
        conn.send(reply)
    except OSError:  # the sweep process is gone (killed or stopped): no one is left to tell
        pass
    conn.close()


def _child(blob: bytes, gpus: list[str] | None = None) -> bytes:
    """Runs in the arm's process: one Hydra job, output to train.log; ``gpus``: its slot's share."""
    hydra_context, task_function, sweep_config, singleton_state, threads = cloudpickle.loads(blob)
    register()  # the ${scalerl_run_name:} resolver, before anything resolves
    os.environ["SCALERL_NUM_THREADS"] = str(threads)
    if gpus is not None:  # its slot's share (launch/gpus.py), before anything in this process touches CUDA
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
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
    on_gpu = any(str(cfg.train.device) != "cpu" for _, cfg in jobs)
    devices = gpu_shares.visible_gpus() if on_gpu else []
    workers, shares = gpu_shares.assign(devices, workers, getattr(launcher, "gpus_per_arm", "auto"),
                                  share=bool(getattr(launcher, "share_gpus", False)))
    where = f"; GPUs per slot: {' | '.join(','.join(share) for share in shares)}" if devices else ""
    print(f"[scalerl] running {len(jobs)} arm(s), {workers} at a time, {'/'.join(map(str, sorted(set(threads))))} "
          f"thread(s) each{where}; logs in <run dir>/train.log", flush=True)
    state = Singleton.get_state()
    arms, interrupted = None, None
    try:  # from the first line the user reads: a Ctrl-C while the arms' processes start is one too
        blobs = [cloudpickle.dumps((launcher.hydra_context, launcher.task_function, cfg, state, threads[k]))
                 for k, (_, cfg) in enumerate(jobs)]
        arms = ArmProcesses(arm_context(), blobs, workers, shares if devices else None)
        _watch(arms, [sweep_run_dir(cfg) for _, cfg in jobs])
    except KeyboardInterrupt as e:  # Ctrl-C reached every arm too (one process group): wait for their checkpoints
        interrupted = signal_of(e)
        try:
            if arms is not None:
                arms.queue.clear()
                if interrupted != signal.SIGINT:  # SIGTERM came to this process alone: pass it on to the arms
                    arms.signal_all(interrupted)
            print(f"\n[scalerl] interrupted ({'Ctrl-C' if interrupted == signal.SIGINT else 'SIGTERM'}): arms are "
                  "checkpointing; relaunch the same command to resume", flush=True)
            if arms is not None:
                arms.drain(deadline_s=STOP_WAIT_S)
        except KeyboardInterrupt:  # a second one: the arms stop now (signals.py); stop waiting for them
            if arms is not None:
                arms.drain(deadline_s=0)
    if interrupted is not None:  # a stopped sweep is not a finished one: no leaderboard of half-trained arms
        for s in (signal.SIGINT, signal.SIGTERM):  # one more while this process exits changes nothing
            signal.signal(s, signal.SIG_IGN)
        raise SystemExit(exit_code(interrupted))  # 130 after Ctrl-C, 143 after SIGTERM
    results: list[JobReturn] = []
    for k, (overrides, cfg) in enumerate(jobs):
        ok, payload = arms.replies.get(k, (False, "the arm was never started"))
        results.append(cloudpickle.loads(payload) if ok else failed_return(overrides, cfg, RuntimeError(payload)))
    return results


def arm_context():
    """The multiprocessing context arms start in: forked from a server that imported ``ARM_PRELOAD``.

    The server starts with SIGINT blocked (a signal mask survives fork and exec): a Ctrl-C while it
    imports ``ARM_PRELOAD`` (seconds) would otherwise kill it with a traceback on the terminal.
    Blocked, not ignored, in this process while it starts the server: a Ctrl-C then waits and is
    delivered once the mask is restored, where an ignored one was lost and the sweep ran on (seen
    under load: the server's start took longer than two Ctrl-C 0.3 s apart). Each arm unblocks
    SIGINT and takes it back as it starts (``_arm_process``)."""
    from multiprocessing import forkserver, resource_tracker

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(ARM_PRELOAD)
    # The server starts multiprocessing's resource tracker first, whose start unblocks SIGINT
    # when it is done: started here, before the mask, it is already running then.
    resource_tracker.ensure_running()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if main else None
    try:
        forkserver.ensure_running()
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C meanwhile is raised here
    return ctx


def _death(exitcode: int | None) -> str:
    """Why an arm's process ended without a result, e.g. 'killed by SIGKILL'."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the arm's process was killed by {name} before it reported; relaunch the sweep to resume it"
    return f"the arm's process exited with code {exitcode} before it reported; relaunch the sweep to resume it"


class ArmProcesses:
    """One process per arm, at most ``workers`` alive at once, each waited for on its own:
    a process that dies fails its arm alone (``replies[k] = (False, why)``).
    ``shares``: one GPU list per slot (launch/gpus.py), or None to leave CUDA_VISIBLE_DEVICES alone;
    an arm takes a free slot's share and hands it on to the next arm when its process ends."""

    def __init__(self, ctx, blobs: list[bytes], workers: int, shares: list[list[str]] | None = None):
        self.ctx, self.blobs, self.workers = ctx, blobs, workers
        self.shares = shares
        self.free = list(range(workers))   # slots (GPU shares) no live arm holds
        self.slot: dict[int, int] = {}     # arm index -> its slot
        self.queue = list(range(len(blobs)))
        self.live: dict[int, tuple] = {}   # arm index -> (process, reader or None once it hit EOF)
        self.replies: dict[int, tuple[bool, object]] = {}
        self.replied_at: dict[int, float] = {}  # arm index -> when its reply came (its process should end)

    def signal_all(self, signum: int) -> None:
        """Send ``signum`` to every live arm (a SIGTERM the sweep's process alone received)."""
        for proc, _ in self.live.values():
            try:
                os.kill(proc.pid, signum)
            except (ProcessLookupError, TypeError):  # ended, or not started
                pass

    def drain(self, deadline_s: float) -> None:
        """Wait for the live arms to end (after Ctrl-C they checkpoint and exit); past ``deadline_s``
        terminate the rest, so one hung arm cannot hang the sweep."""
        end = time.time() + deadline_s
        while self.live and time.time() < end:
            self.poll(1.0)
        for proc, _ in self.live.values():
            proc.terminate()
        for proc, _ in self.live.values():
            proc.join(10)

    def start_more(self) -> None:
        while self.queue and len(self.live) < self.workers:
            k = self.queue.pop(0)
            self.slot[k] = self.free.pop(0)
            gpus = None if self.shares is None else self.shares[self.slot[k]]
            reader, writer = self.ctx.Pipe(duplex=False)
            proc = self.ctx.Process(target=_arm_process, args=(self.blobs[k], writer, gpus),
                                    name=f"scalerl-arm-{k}")
            # Ctrl-C or SIGTERM mid-start would cut the pickled arm short, and the new process would die
            # with a traceback on the terminal: they wait (blocked) until it has started.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            writer.close()  # the child holds the only writer: its death is an EOF here
            self.live[k] = (proc, reader)

    def poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for an arm to reply or end; collect replies, reap ended arms."""
        handles = [h for proc, reader in self.live.values() for h in (proc.sentinel, reader) if h is not None]
        if handles:
            wait_ready(handles, timeout)
        for k, (proc, reader) in list(self.live.items()):
            if reader is not None and reader.poll():
                try:
                    self.replies[k] = reader.recv()
                except (EOFError, OSError):  # died before it replied; its exit code says how
                    pass
                reader.close()
                reader = None
                self.live[k] = (proc, None)
            if reader is None and proc.is_alive() and time.time() - self.replied_at.setdefault(k, time.time()) > EXIT_WAIT_S:
                proc.terminate()  # replied but lingers (a stray thread or child): its slot is the next arm's
            if not proc.is_alive():
                if reader is not None and reader.poll():   # replied just before it ended
                    try:
                        self.replies[k] = reader.recv()
                    except (EOFError, OSError):
                        pass
                proc.join()
                self.replies.setdefault(k, (False, _death(proc.exitcode)))
                if reader is not None:
                    reader.close()
                del self.live[k]
                self.free.append(self.slot.pop(k))


def _watch(arms: ArmProcesses, run_dirs: list[Path]) -> None:
    """Run every arm to its end, showing a live progress table."""
    def step() -> bool:
        arms.start_more()
        arms.poll(1.0)
        return bool(arms.live or arms.queue)

    if sys.stdout.isatty():
        with Live(_table(run_dirs), refresh_per_second=1) as live:
            while step():
                live.update(_table(run_dirs))
        return
    # Without a terminal (train.log, CI): an arm's line when it changed, else every 2 minutes with
    # how long its phase has lasted, so that no line repeats unchanged for minutes.
    shown: dict[Path, tuple[str, float]] = {}
    going = True
    while going:
        going = step()
        for d in run_dirs:
            p = read_json(d / "progress.json") or {}
            pr = p.get("pass_rate")
            line = (f"{_status(p, time.time(), elapsed=False)} step {p.get('step', 0)}/{p.get('total', '?')}"
                    f" pass_rate {'-' if pr is None else f'{pr:.3f}'}")
            last = shown.get(d)
            if last is None or last[0] != line or time.time() - last[1] > 120 or not going:
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
