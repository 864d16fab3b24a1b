"""What an arm and a sweep will cost before they start: compute, wall time, device-hours (no torch).

The compute is on the run's own axis (``train/compute.py``): per token 6·N trained plus 2·N
generated, N the parameters without the input embedding. A step trains and generates each group's
prompt once and its completions, ``prompts x (prompt tokens + generations x completion tokens)``
tokens, so a step costs 8·N times that. Before a run, the lengths are bounds (the completion budget,
``PROMPT_TOKENS``); a calibration (``launch/calibrate.py``) measures the step instead.

The time comes from a stated throughput, in FLOPs a second on that axis:
- measured: a few steps of the arm itself on this machine (``hydra.sweeper.cost.calibrate=true``),
  which also measures the start-up and an eval, so ``wall = start + steps x step + evals x eval``;
- assumed: ``mfu`` x the device's peak (``PEAK_FLOPS`` for a GPU, ``CPU_CORE_FLOPS`` a core on a
  CPU; ``hydra.sweeper.cost.peak_flops`` overrides it), printed with the number. An MFU misses
  what does not scale with FLOPs (start-up, evals, a tiny model's per-step overhead): on a CPU it is
  a guess, and the calibration is the estimate to trust (benchmarks/RESULTS.md).
Device-hours are wall x the devices one arm holds (the trainer's, plus a device per generator
process), as the run itself counts them (``train/loop.py``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scalerl.config.resources import PROMPT_TOKENS, Shape

PEAK_FLOPS = {"GB200": 2.5e15, "B200": 2.25e15, "H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
"""Dense bf16 FLOP/s of one GPU, by the name's model (vendor data sheets, no sparsity)."""
GPU_MFU = 0.25
"""Assumed on a GPU: benchmarks/gpu_check.sh's target for a training step at 8 x 16 x 256."""
CPU_CORE_FLOPS = 5e10
"""Assumed fp32 FLOP/s of one CPU core (AVX2 FMA at about 3 GHz)."""
CPU_MFU = 0.3
"""Assumed on a CPU, of the bound's FLOPs: the embedded default's bound (every completion at its
budget, 256-token prompts) over its measured steps and evals on the reference machine (2 cores, at
load 11, 2026-12-06: benchmarks/RESULTS.md) is about 0.3 of 2 x CPU_CORE_FLOPS. The bound over-counts
its short prompts and completions about 7x, which offsets a tiny model's per-token overhead; for any
other model or machine it is a guess, and the calibration is the estimate to trust."""


def flop_parameters(shape: Shape) -> int:
    """N of the compute axis: the parameters without the input embedding, unless it is tied."""
    return shape.parameters() - (0 if shape.tied else shape.vocab * shape.hidden)


def step_flops(shape: Shape, prompts: int, generations: int, prompt_tokens: int, completion_tokens: int) -> float:
    """One step on the compute axis: 6N trained + 2N generated per token, prompts counted once a group."""
    return 8.0 * flop_parameters(shape) * prompts * (prompt_tokens + generations * completion_tokens)


@dataclass(frozen=True)
class Throughput:
    flops_per_s: float
    """FLOPs a second on the compute axis, for one arm (all its devices)."""
    source: str
    """Measured or assumed, and how: printed with every estimate."""
    start_s: float = 0.0
    """Measured start-up (imports, model, warm start, processes); 0 when assumed."""
    eval_s: float = 0.0
    """Measured seconds per held-out eval; 0 when assumed."""
    step_flops: float = 0.0
    """Measured compute per step (0: use the bound from the config)."""
    load: float = 0.0
    """The machine's load (runnable threads, 1-minute mean) when it was measured; 0 when assumed."""
    copies: int = 0
    """Arms measured at once (their sharing of the cores is in the numbers); 0 when assumed."""


def assumed(devices: int, *, gpu_name: str = "", cores: int = 1, mfu: float | None = None,
            peak_flops: float | None = None) -> Throughput:
    """The throughput an MFU assumption gives: devices x peak x mfu; on a CPU, the cores are the device."""
    if gpu_name:
        peak = peak_flops or next((v for k, v in PEAK_FLOPS.items() if k in gpu_name.upper()), PEAK_FLOPS["H100"])
        mfu = GPU_MFU if mfu is None else mfu
        what = f"{gpu_name}: {peak:.3g} FLOP/s each"
        total = devices * peak * mfu
    else:
        peak = peak_flops or CPU_CORE_FLOPS * cores
        mfu = CPU_MFU if mfu is None else mfu
        what = f"a CPU of {cores} core(s), {peak:.3g} FLOP/s"
        total = peak * mfu
    return Throughput(total, f"assumed MFU {mfu:g} of {what} ({total:.3g} FLOP/s; hydra.sweeper.cost.mfu, "
                             f"peak_flops override it, cost.calibrate=true measures it here)")


@dataclass(frozen=True)
class ArmCost:
    steps: int
    evals: int
    compute: float
    """FLOPs on the compute axis for the configured steps."""
    compute_basis: str
    wall_s: float
    devices: int
    throughput: Throughput

    @property
    def device_hours(self) -> float:
        return self.wall_s * self.devices / 3600

    def to_dict(self) -> dict:
        return {"steps": self.steps, "evals": self.evals, "compute": self.compute, "compute_basis": self.compute_basis,
                "wall_s": self.wall_s, "devices": self.devices, "device_hours": self.device_hours,
                "throughput": asdict(self.throughput)}

    def line(self) -> str:
        return (f"{self.compute:.3g} FLOPs ({self.steps} steps, {self.compute_basis}), about {duration(self.wall_s)}"
                f" and {self.device_hours:.3g} device-hours on {self.devices} device(s)")


def arm_cost(shape: Shape, *, steps: int, evals: int, prompts: int, generations: int, completion_budget: int,
             devices: int, throughput: Throughput, slowdown: float = 1.0) -> ArmCost:
    """One arm: compute of its steps, and its wall time at `throughput`, `slowdown` x slower for the
    arms that share its cores (``sweep_wall``)."""
    if throughput.step_flops > 0:
        per_step, basis = throughput.step_flops, "the calibration's measured step"
    else:
        tokens = min(completion_budget + PROMPT_TOKENS, shape.context)
        per_step = step_flops(shape, prompts, generations, tokens - completion_budget, completion_budget)
        basis = "at most: every completion at its budget"
    compute = steps * per_step
    busy = compute / throughput.flops_per_s + evals * throughput.eval_s
    if throughput.copies > 1:      # measured side by side already: the sharing is in the numbers
        slowdown = 1.0
    return ArmCost(steps, evals, compute, basis, throughput.start_s + busy * slowdown, devices, throughput)


def sharing(workers: int, threads_per_arm: int, cores: int, on_cpu: bool, load: float = 0.0) -> float:
    """How much slower each arm runs beside the others than it ran alone: CPU arms that want more
    cores than there are share them. Each arm wants its threads_per_arm (what the local launcher packs
    by, launch/local_pool.py), and `load` other runnable threads were there already when it was
    measured (the calibration's step times include their share), so the slowdown is
    max(cores, load + workers x want) / max(cores, load + want). GPU arms own their devices.

    >>> sharing(3, 1, 2, True)          # an idle 2-core machine, 3 one-thread arms: 1.5x
    1.5
    >>> round(sharing(3, 1, 2, True, load=5.0), 3)   # 5 other threads already: 8 / 6
    1.333
    """
    if not on_cpu:
        return 1.0
    want = max(threads_per_arm, 1)
    return max(cores, load + workers * want) / max(cores, load + want)


def sweep_wall(arm_walls: list[float], workers: int) -> float:
    """Arms `workers` at a time, each slot taking the next arm when its own ends (longest first is
    not assumed: the launcher starts them in order)."""
    slots = [0.0] * max(1, min(workers, len(arm_walls) or 1))
    for wall in arm_walls:
        k = slots.index(min(slots))
        slots[k] += wall
    return max(slots) if arm_walls else 0.0


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "an unknown time"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
