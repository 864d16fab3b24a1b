"""The cost of a sweep before it starts: each arm's compute, wall time and device-hours, and the sweep's.

Printed by ``--dry-run`` and by every launch under the arm table (``sweeping.run_sweep``); the
arithmetic is ``config/cost.py``'s. At launch each arm's estimate goes to ``<run_dir>/cost_estimate.json``,
and the run's ``summary.json`` records it beside what the run spent (``launch/task.py``), so the
estimate's error shows on every arm.

The throughput: ``hydra.sweeper.cost.calibrate=true`` runs the first arm to launch for
``calibrate_steps`` steps on this machine (single runs in a temporary directory, their evals at
step 0 and at the end), as many copies at once as the sweep runs arms at once, each with the threads
the local launcher would give it, and measures start-up, step and eval; other arms of the same shape
scale by their steps and evals. Measured one at a time, two arms of the embedded task that then ran
side by side took 1.7x the estimate (benchmarks/RESULTS.md): what arms take from each other on a
shared CPU is measured, not modelled. Otherwise
an MFU assumption, printed with its number. A SLURM sweep's GPUs and a CUDA device are never
calibrated from here (the arms run elsewhere, or the device is the arms'): the assumption names the
GPU it took (``hydra.sweeper.cost.gpu``, default the H100).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from scalerl.config import cuda_devices
from scalerl.config.cost import Throughput, arm_cost, assumed, duration, sharing, sweep_wall
from scalerl.config.eval_schedule import eval_steps
from scalerl.config.resources import local_machine, model_shape
from scalerl.core.errors import check
from scalerl.core.jsonio import write_json_atomic
from scalerl.launch.packing import auto_parallel
from scalerl.registry import async_node

ESTIMATE_FILE = "cost_estimate.json"
DEFAULTS = {"calibrate": False, "calibrate_steps": 3, "mfu": None, "peak_flops": None, "gpu": "H100"}
CALIBRATE_TIMEOUT_S = 900
REPLACED = ("train.steps", "train.eval_every", "logger", "hydra.run.dir")


def settings(sweeper) -> dict:
    """hydra.sweeper.cost, each key checked (one line naming it)."""
    given = dict(getattr(sweeper, "cost", None) or {})
    unknown = sorted(set(given) - set(DEFAULTS))
    check(not unknown, f"hydra.sweeper.cost.{unknown[0] if unknown else ''}", f"unknown key; known: {sorted(DEFAULTS)}")
    s = {**DEFAULTS, **given}
    check(isinstance(s["calibrate"], bool), "hydra.sweeper.cost.calibrate", f"must be true or false, got {s['calibrate']!r}")
    check(isinstance(s["calibrate_steps"], int) and s["calibrate_steps"] >= 1, "hydra.sweeper.cost.calibrate_steps",
          f"must be an integer >= 1, got {s['calibrate_steps']!r}")
    for key in ("mfu", "peak_flops"):
        v = s[key]
        check(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and (key != "mfu" or v <= 1)),
              f"hydra.sweeper.cost.{key}", f"must be null or a number in {'(0, 1]' if key == 'mfu' else '(0, inf)'}, got {v!r}")
    return s


def evals_of(c) -> int:
    t = c.train
    return len(eval_steps(t.steps, every=t.eval_every, points=t.eval_points, first=t.eval_first))


def target(c, launcher) -> tuple[str, int, int]:
    """(gpu name or "" for a CPU, devices one arm holds, cores one arm's machine has)."""
    launcher = launcher or {}
    node = async_node(c)
    own_generators = max(0, node.generators - node.external_generators - node.generator_nodes)
    if "Slurm" in str(launcher.get("_target_", "")):
        gpus = int(launcher.get("gpus_per_node") or 0) * int(launcher.get("nodes") or 1)
        return ("?" if gpus else ""), max(gpus, 1), int(launcher.get("cpus_per_task") or 1)
    here = local_machine()
    if c.train.device != "cpu" and cuda_devices() > 0:
        return cuda_name() or "?", max(1, int(c.train.gpus or 1)), here.cores
    return "", 1 + own_generators, here.cores   # the run counts a device per generator process (train/loop.py)


def cuda_name() -> str:
    """CUDA device 0's name, asked of libcuda ("" without one). Untested here: no GPU."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        device, name = ctypes.c_int(0), ctypes.create_string_buffer(128)
        if lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(device), 0) or lib.cuDeviceGetName(name, 128, device):
            return ""
        return name.value.decode(errors="replace")
    except (OSError, AttributeError):
        return ""


def calibrate(overrides: list[str], steps: int, threads: int, copies: int = 1) -> Throughput:
    """Run `copies` copies of the arm at once for `steps` steps here, as the sweep will run its arms
    side by side, and measure them: their step, eval and start-up times include the cores they share
    with each other and with whatever else runs. Raises RuntimeError when a copy fails."""
    keep = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in REPLACED]
    env = {**os.environ, "SCALERL_NUM_THREADS": str(threads), "SCALERL_NO_BAR": "1"}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="scalerl-calibrate-") as tmp:
        runs = [Path(tmp) / f"run{k}" for k in range(copies)]
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *keep, f"train.steps={steps}",
                                   f"train.eval_every={steps}", "logger=none", f"hydra.run.dir={run}"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for run in runs]
        ends, errors = [], []
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=max(1.0, CALIBRATE_TIMEOUT_S - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise
            ends.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                errors.append(f"the calibration run failed ({proc.returncode}): {err.strip()[-300:]}")
        print(f"[scalerl] calibrated the cost on {steps} steps of {copies} cop{'ies' if copies > 1 else 'y'} of one arm "
              f"at once in {max(ends):.0f} s", flush=True)
        if errors:
            raise RuntimeError(errors[0])
        rows = [[json.loads(x) for x in (r / "steps.jsonl").read_text().splitlines() if x.strip()] for r in runs]
        evals = [[json.loads(x) for x in (r / "metrics.jsonl").read_text().splitlines() if x.strip()] for r in runs]
    n_steps = sum(len(r) for r in rows)
    step_s = sum(x["step_time_s"] for r in rows for x in r) / n_steps
    n_evals = sum(len(e) for e in evals)
    eval_s = sum(x.get("eval_s", 0.0) for e in evals for x in e) / max(n_evals, 1)
    per_step = sum(r[-1]["compute"] for r in rows) / n_steps
    start = max(0.0, sum(ends) / copies - step_s * n_steps / copies - eval_s * n_evals / copies)
    return Throughput(per_step / step_s, f"measured here: {steps} steps of this arm, {copies} at once with {threads}"
                      f" thread(s) each, {step_s:.2f} s a step ({per_step / step_s:.3g} FLOP/s), {eval_s:.1f} s an"
                      f" eval, {start:.0f} s to start, at load {load:.1f}", start_s=start, eval_s=eval_s,
                      step_flops=per_step, load=load, copies=copies)


def own_start_s() -> float:
    """Seconds this process has run (its imports and the sweep's composition): a launch pays them too."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def estimate(arms, config, sweeper) -> tuple[list[tuple], float, float, str]:
    """[(arm, ArmCost)], the sweep's wall seconds and device-hours, and the throughput's source line.

    arms: the sweep's arms to launch, each with its validated config (``Arm.config``)."""
    s = settings(sweeper)
    started = own_start_s()      # before any calibration: a launch pays this process's start, not that
    launcher = OmegaConf.select(config, "hydra.launcher", default=None)
    launcher = OmegaConf.to_container(launcher, resolve=True) if launcher is not None else {}
    todo = [a for a in arms if a.config is not None and model_shape(a.config.model) is not None]
    if not todo:
        return [], 0.0, 0.0, ""
    local = "Slurm" not in str(launcher.get("_target_", ""))
    per_arm = int(launcher.get("threads_per_arm") or 1)
    workers = int(launcher.get("n_parallel") or 0) or len(todo)
    if local and not launcher.get("n_parallel"):
        workers = auto_parallel(len(todo), per_arm)
    if not local:
        workers = int(launcher.get("array_parallelism") or len(todo))
    workers = max(1, min(workers, len(todo)))
    measured = None
    costs = []
    for a in todo:
        c = a.config
        gpu, devices, cores = target(c, launcher)
        if gpu:
            tp = assumed(devices, gpu_name=s["gpu"] if gpu == "?" else gpu, mfu=s["mfu"], peak_flops=s["peak_flops"])
        elif s["calibrate"] and local:
            if measured is None:
                threads = c.train.threads or max(per_arm, 1 + int(async_node(c).generators))
                measured = calibrate(a.overrides, s["calibrate_steps"], threads, copies=workers)
            tp = measured
        else:
            tp = assumed(devices, cores=cores, mfu=s["mfu"], peak_flops=s["peak_flops"])
        slow = sharing(workers, per_arm, cores, on_cpu=not gpu and local, load=tp.load)
        costs.append((a, arm_cost(model_shape(c.model), steps=c.train.steps, evals=evals_of(c),
                                  prompts=c.batch.prompts, generations=c.batch.generations,
                                  completion_budget=c.length.completion_budget(), devices=devices,
                                  throughput=tp, slowdown=slow)))
    wall = started + sweep_wall([k.wall_s for _, k in costs], workers)
    return costs, wall, sum(k.device_hours for _, k in costs), costs[0][1].throughput.source


def print_cost(costs: list[tuple], wall: float, device_hours: float, source: str) -> None:
    if not costs:
        return
    for a, k in costs:
        print(f"[scalerl] cost of arm {a.name}: {k.line()}")
    total = sum(k.compute for _, k in costs)
    print(f"[scalerl] cost of the sweep: {total:.3g} FLOPs, about {duration(wall)} and {device_hours:.3g} "
          f"device-hours; throughput {source}")


def report(arms, sweeper, states) -> tuple | None:
    """Estimate and print the cost of the arms still to train; (costs, sweep wall) for ``record``. A
    failed calibration is said and skipped: it never stops a launch; a bad hydra.sweeper.cost key does."""
    settings(sweeper)
    try:
        costs, wall, device_hours, source = estimate([a for a in arms if a.state in states], sweeper.config, sweeper)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError, json.JSONDecodeError) as e:
        print(f"[scalerl] warning: no cost estimate ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    print_cost(costs, wall, device_hours, source)
    return costs, wall


def record(costs: list[tuple], sweep_wall_s: float) -> None:
    """Each arm's estimate in its run directory, for its summary.json (launch/task.py)."""
    for a, k in costs:
        a.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.run_dir / ESTIMATE_FILE, {**k.to_dict(), "sweep_wall_s": sweep_wall_s,
                                                      "estimated_at": time.time()})


def spent(estimate_file: Path, summary: dict) -> dict | None:
    """The estimate beside what the run spent: wall seconds, compute, device-hours, and their ratios."""
    try:
        est = json.loads(estimate_file.read_text())
    except (OSError, ValueError):
        return None
    wall = summary.get("elapsed_s")
    # device-hours held (wall x devices), what a budget pays; the run's own `device_hours` counts its
    # steps only (the alternative x-axis, train/loop.py) and is kept beside it
    actual = {"wall_s": wall, "compute": summary.get("compute"),
              "device_hours": wall * est.get("devices", 1) / 3600 if wall else None}
    ratio = {k: (actual[k] / est[k] if actual.get(k) and est.get(k) else None) for k in actual}
    return {"estimated": est, "spent": {**actual, "device_hours_in_steps": summary.get("device_hours")},
            "spent_over_estimated": ratio}
