"""What one arm will ask of the machine it runs on, estimated from its config alone (no torch).

``estimate`` sizes an arm's memory in the terms of docs/trainer-memory.md: fp32 weights, gradients
and AdamW's two moments (16 bytes a parameter) plus AdamW's temporaries (two slices of 32 MiB on a
CPU, ``train/optimizer.py``; foreach AdamW's on CUDA is full-size, 4 bytes a parameter),
the largest activation of a micro-batch (checkpointed layer inputs and one layer's recompute, or
every layer's without ``model.activation_checkpointing``; the LM head's logits chunk and the tied
embedding's dense gradient), each generator's own copy of the weights and KV cache, and each
process's Python/torch runtime. It is a bound to refuse what cannot fit, not a profile: on the
Qwen2-0.5B shape at 2 prompts x 4 completions x 512 tokens (``async=sync``) it says 13.3 GiB for the
arm (the trainer, its engine's own copy, the runtime) where one measured step peaks at 9.02 GB
(benchmarks/bench_memory.py). ``check_resources`` compares it, and the arm's threads,
with the target machine (``Machine``) and raises ``ConfigError`` naming the key to change; a legal
but costly value comes back as a warning that says its cost.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from scalerl.core.errors import ConfigError, check
from scalerl.registry import async_node

GiB = 1 << 30
SLICE_BYTES = 32 << 20
"""train/optimizer.py's: the most bytes of a tensor AdamW steps at once on a CPU (no torch here)."""
RUNTIME_BYTES = GiB // 2
"""One process's Python, torch and transformers before any tensor (about 0.4-0.5 GiB resident)."""
PROMPT_TOKENS = 256
"""Prompt tokens allowed beside the completion budget (the model's context bounds both)."""
HEAD_CHUNK_BYTES = 256 << 20
"""train.head_chunk=0: 256 MiB of fp32 logits per chunk (docs/trainer-memory.md)."""
INT64_MAX = 2**63 - 1
OVERSUBSCRIBED = 8
"""Threads a core past which a thread count is refused (up to it, more threads than cores is warned)."""
HUGE = {"train.steps": 10**6, "model.warmstart.max_steps": 10**6}
"""Legal counts past which the dry run says what they will cost (a run of a million steps is a
month at the paper's pace; docs/embedded.md's default is 300)."""


@dataclass(frozen=True)
class Machine:
    memory: int
    """Bytes an arm may use (RAM, a SLURM job's mem_gb, or a CUDA device's memory)."""
    cores: int
    where: str
    """What was assumed, said with every estimate."""


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    context: int
    tied: bool

    def parameters(self) -> int:
        kv = self.hidden * self.kv_heads // self.heads
        layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


@dataclass(frozen=True)
class Estimate:
    parameters: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    generators: int
    runtime: int
    tokens_per_microbatch: int
    flops_per_step: float

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.generators + self.runtime

    def parts(self) -> str:
        return ", ".join(f"{k} {_gib(getattr(self, k))}" for k in
                         ("weights", "gradients", "optimizer", "activations", "generators", "runtime"))


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n < 1000 * GiB else f"{n / 2**40:.1f} TiB"


def model_shape(model) -> Shape | None:
    """The model's shape, from its option's ``architecture()`` (None: unknown or malformed)."""
    c = model.architecture()
    if c is None:
        return None
    try:
        heads = int(c["num_attention_heads"])
        return Shape(int(c["vocab_size"]), int(c["hidden_size"]), int(c["num_hidden_layers"]), heads,
                     int(c.get("num_key_value_heads") or heads), int(c["intermediate_size"]),
                     int(c.get("max_position_embeddings") or 1 << 20), bool(c.get("tie_word_embeddings", False)))
    except (ValueError, KeyError, TypeError, AttributeError):  # a config.json without the shape's keys
        return None


def _on_cpu(c) -> bool:
    from scalerl.config import cuda_devices  # the package imports this module

    return c.train.device == "cpu" or (c.train.device == "auto" and cuda_devices() == 0)


def estimate(c, shape: Shape, world_size: int = 1) -> Estimate:
    """One arm's peak memory on its trainer's device and host (bytes), see the module docstring."""
    p = shape.parameters()
    b = c.batch
    tokens = min(c.length.completion_budget() + PROMPT_TOKENS, shape.context)
    rows = max(1, b.prompts // b.minibatches // world_size) * b.generations
    n = rows * tokens
    if c.train.micro_batch_tokens:
        n = min(n, max(c.train.micro_batch_tokens, tokens))
    h, i = shape.hidden, shape.intermediate
    layer = n * (10 * h + 4 * i) * 4 + n * shape.heads * tokens * 4      # one layer: projections, MLP, scores
    saved = shape.layers * n * h * 4 if c.model.activation_checkpointing else shape.layers * layer
    head = min(n * shape.vocab * 4, c.train.head_chunk * shape.vocab * 4 or HEAD_CHUNK_BYTES) * 3
    activations = saved + layer + head + shape.vocab * h * 4            # + the embedding's dense gradient
    node = async_node(c)
    own = max(0, node.generators - node.external_generators - node.generator_nodes)
    kv = b.prompts * b.generations * tokens * shape.layers * 2 * (h * shape.kv_heads // shape.heads) * 4
    generator = 4 * p + kv                                             # its own weights (fp32 on a CPU) and cache
    in_process = node.generators == 0 and c.generation.samples_policy  # an engine over the trainer's Policy
    generators = generator if in_process else own * generator
    flops = 6.0 * p * b.prompts * b.generations * tokens
    temporary = 2 * min(SLICE_BYTES, 4 * shape.vocab * h) if _on_cpu(c) else 4 * p   # AdamW's step (train/optimizer.py)
    return Estimate(p, 4 * p, 4 * p, 8 * p + temporary, activations, generators, RUNTIME_BYTES * (1 + own), n, flops)


def local_machine() -> Machine:
    """This machine: its RAM (or a lower cgroup limit) and the cores this process may use."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        memory = min(memory, int(limit)) if limit.isdigit() else memory
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Machine(memory, cores, f"this machine ({memory / GiB:.1f} GiB RAM, {cores} cores)")


def cuda_memory() -> int:
    """Memory of CUDA device 0, asked of libcuda directly (0 without a driver or device)."""
    import ctypes  # stdlib; only where a config trains on CUDA

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        device, total = ctypes.c_int(0), ctypes.c_size_t(0)
        if lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(device), 0) or lib.cuDeviceTotalMem_v2(ctypes.byref(total), device):
            return 0
        return int(total.value)
    except (OSError, AttributeError):
        return 0


def target_machine(launcher, device: str = "auto") -> Machine | None:
    """Where an arm runs: a SLURM task (its mem_gb and cpus_per_task), this machine's CUDA device when
    the trainer uses one, or this machine's RAM. None: a SLURM task with GPUs, whose memory is not
    known from here (only its threads are checked)."""
    launcher = launcher or {}
    if "Slurm" in str(launcher.get("_target_", "")):
        mem, cpus, gpus = launcher.get("mem_gb"), launcher.get("cpus_per_task") or 1, launcher.get("gpus_per_node")
        if gpus:
            return None
        memory = int(mem) * GiB if mem else 1 << 62
        return Machine(memory, int(cpus), f"a SLURM task (hydra.launcher.mem_gb={mem}, hydra.launcher.cpus_per_task={cpus})")
    here = local_machine()
    if device in ("cuda", "auto") and os.environ.get("CUDA_VISIBLE_DEVICES") not in ("", "-1"):
        memory = cuda_memory()
        if memory:
            return Machine(memory, here.cores, f"this machine's CUDA device 0 ({memory / GiB:.1f} GiB), {here.cores} cores")
    return here


def _big_ints(value, key: str):
    """(key, value) of every integer beyond int64 in a validated config."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > INT64_MAX:
            yield key, value
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _big_ints(getattr(value, f.name, None), f"{key}.{f.name}" if key else f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _big_ints(v, f"{key}.{k}")


def check_resources(c, launcher=None, *, world_size: int = 1, machine: Machine | None = None) -> tuple[str, list[str]]:
    """Refuse (``ConfigError`` naming the key) what the target machine cannot give one arm; return
    the estimate's one-line summary and warnings for legal values that will cost a lot."""
    for key, value in _big_ints(c, ""):
        raise ConfigError(key, f"{value} does not fit a 64-bit integer (torch, numpy and the run's records "
                          "overflow)", f"use a value below {INT64_MAX:.1e}")
    machine = machine or target_machine(launcher, c.train.device)
    if machine is None:
        cpus = int((launcher or {}).get("cpus_per_task") or 1)
        check(c.train.threads <= cpus, "train.threads",
              f"{c.train.threads} torch threads, and the SLURM task has hydra.launcher.cpus_per_task={cpus}")
        return "memory not estimated: a SLURM task with GPUs, whose memory is not known here", []
    warnings = []
    local = "Slurm" not in str((launcher or {}).get("_target_", ""))
    per_arm = int((launcher or {}).get("threads_per_arm") or 1) if local else machine.cores
    # More threads than cores is legal, only slower (warned below with its cost); past OVERSUBSCRIBED
    # threads a core, each thread gets too little of one to be anything but a mistake.
    limit = OVERSUBSCRIBED * machine.cores
    if local:
        check(per_arm <= limit, "hydra.launcher.threads_per_arm",
              f"{per_arm} threads per arm, and {machine.where} has {machine.cores} cores (at most {limit})")
    check(c.train.threads <= limit, "train.threads",
          f"{c.train.threads} torch threads, and {machine.where} has {machine.cores} cores (at most {limit})")
    node = async_node(c)
    own = node.generators - node.external_generators - node.generator_nodes
    # The local launcher splits an arm's threads_per_arm among its processes, at least one each (local_pool.py)
    threads = c.train.threads + own if c.train.threads else max(per_arm, 1 + own)
    if threads > machine.cores:
        warnings.append(f"an arm runs {threads} threads (trainer + async.generators={node.generators}) on "
                        f"{machine.cores} core(s): each runs at about {machine.cores / threads:.2g}x its own speed")
    shape = model_shape(c.model)
    steps = {"train.steps": c.train.steps,
             "model.warmstart.max_steps": c.model.warmstart.max_steps if c.model.warmstart.enabled else 0}
    if shape is None:
        return f"memory not estimated (model.path's config.json lacks the model's shape); target {machine.where}", warnings
    est = estimate(c, shape, world_size)
    for key, value in steps.items():
        if value > HUGE[key]:
            per_step = est.flops_per_step if key == "train.steps" else \
                6.0 * est.parameters * c.model.warmstart.batch_size * min(shape.context, PROMPT_TOKENS)
            warnings.append(f"{key}={value}: {value * per_step:.1e} FLOPs if it runs them all "
                            f"(past {HUGE[key]:,} steps scalerl says what a count costs)")
    if est.total > machine.memory:
        raise ConfigError(_largest_key(c, est), f"one arm needs about {_gib(est.total)} ({est.parts()}; "
                          f"{est.parameters / 1e6:,.1f}M parameters), and the target, {machine.where}, has "
                          f"{_gib(machine.memory)}", _fix(c, est))
    if est.total > machine.memory // 2:
        warnings.append(f"one arm needs about {_gib(est.total)}, over half of the {_gib(machine.memory)} of "
                        f"the target, {machine.where}")
    summary = (f"about {_gib(est.total)} per arm ({est.parts()}; {est.parameters / 1e6:.1f}M parameters, "
               f"{est.tokens_per_microbatch} tokens per micro-batch), {threads} thread(s); target {machine.where}")
    return summary, warnings


def _largest_key(c, est: Estimate) -> str:
    """The key behind the estimate's largest term."""
    model = c.model.size_key()
    terms = {model: est.weights + est.gradients + est.optimizer, "async.generators": est.generators,
             ("batch.generations" if c.batch.generations >= c.batch.prompts else "batch.prompts"): est.activations}
    return max(terms, key=terms.get)


def _fix(c, est: Estimate) -> str:
    key = _largest_key(c, est)
    if key.startswith("model"):
        return ("a smaller model (model.num_layers, model.hidden_size, model.intermediate_size)" if key == "model.hidden_size"
                else "a smaller checkpoint (model.path)") + ", or a machine with more memory (hydra/launcher=slurm)"
    if key == "async.generators":
        return "fewer generator processes (async.generators), each holds a copy of the weights"
    return "fewer rows per update (batch.prompts, batch.generations, batch.minibatches) or train.micro_batch_tokens=N"
