"""The model contract and the config schemas shared by the ``model`` options."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol

from omegaconf import MISSING

from scalerl.core.errors import check

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class WarmStartConfig:
    """Supervised warm start so RL starts at a 10-20% pass rate (docs/embedded.md)."""

    enabled: bool = True
    lr: float = 2e-3
    batch_size: int = 128
    target_pass_rate: float = 0.12
    """Stop once the sampled held-out pass rate reaches this (the phase transition overshoots a little)."""
    max_steps: int = 4000
    eval_every: int = 10
    seed: int = 0
    threads: int = 1
    """Fixed thread count so the cached warm start is bit-reproducible."""
    final_steps: int = 0
    """After the target: this many more steps on the task's final demonstrations (arith: ``task.think_final``
    of them think), so RL starts from a policy that can think but rarely does (docs/embedded.md); 0 = none."""
    final_lr: float = 5e-4
    """The learning rate of those final steps (the first phase's is ``lr``)."""

    def __post_init__(self) -> None:
        check(self.lr > 0, "model.warmstart.lr", f"must be > 0, got {self.lr}")
        check(0 < self.target_pass_rate < 1, "model.warmstart.target_pass_rate", f"must be in (0, 1), got {self.target_pass_rate}")
        check(self.batch_size > 0, "model.warmstart.batch_size", f"must be > 0, got {self.batch_size}")
        for key in ("max_steps", "eval_every", "threads"):
            check(getattr(self, key) > 0, f"model.warmstart.{key}", f"must be > 0, got {getattr(self, key)}")
        check(self.final_steps >= 0, "model.warmstart.final_steps", f"must be >= 0 (0 = none), got {self.final_steps}")
        check(self.final_lr > 0, "model.warmstart.final_lr", f"must be > 0, got {self.final_lr}")


@dataclass
class ModelConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""
    dtype: str = "auto"
    """Body compute dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 or float16."""
    attn_implementation: Optional[str] = None
    """Passed to from_pretrained (e.g. eager, sdpa, flash_attention_2); None = transformers' default;
    auto = eager when the body computes in fp32, else transformers' default (``train/setup.py``)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward instead of keeping them
    (``models/policy.py``, ``checkpoint_layers``); on for ``model=hf``, off for the tiny default."""
    release_freed_memory: bool = False
    """The trainer returns every freed block of 4 MiB or more to the OS (``core/heap.py``): with
    glibc's default, a layer's freed activations stay resident under the gradients allocated after
    them. On for ``model=hf`` (most of a 0.5B step's activation memory, benchmarks/RESULTS.md); off
    for the tiny default, whose ~5 MB activations it would send through page faults every step
    (a step spent ~45% of its time in the kernel with it)."""
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)

    def identity(self, path: Path) -> object:
        """What determines the checkpoint at ``path`` (the option's ``PrepareFn`` result), for the warm
        start's key: here the directory itself; an option that builds its checkpoint names its settings,
        so that the key is the same on every machine (``train/warmstart.py``)."""
        return str(Path(path).resolve())

    def __post_init__(self) -> None:
        check(self.dtype == "auto" or self.dtype in DTYPES, "model.dtype", f"must be auto or one of {list(DTYPES)}, got {self.dtype!r}")

    def context_length(self) -> Optional[int]:
        """The longest sequence the option's model takes, when the config knows it (None: its checkpoint's)."""
        return None

    def architecture(self) -> Optional[dict]:
        """The model's shape in Hugging Face ``config.json`` keys (``vocab_size``, ``hidden_size``,
        ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
        ``max_position_embeddings``, ``tie_word_embeddings``), known without loading torch; None: unknown.
        The resource check sizes an arm's memory from it (``config/resources.py``)."""
        return None

    def size_key(self) -> str:
        """The key to change for a smaller model, named when an arm does not fit its machine."""
        return "model"

    def is_moe(self) -> Optional[bool]:
        """Whether the model routes tokens to experts (``routing``), from ``architecture()``: a
        ``num_experts`` or ``num_local_experts`` above 0 (Qwen3-MoE, Mixtral, Llama-4) and, where the
        config says which layers have experts (Llama-4's ``moe_layers``), at least one; None: unknown."""
        c = self.architecture()
        if c is None:
            return None
        return int(c.get("num_experts") or c.get("num_local_experts") or 0) > 0 and moe_layers(c) != []

    def scalerl_modeling(self) -> bool:
        """The option's checkpoint runs on scalerl's own module (``models/load.py:OWN_MODULES``) where the run
        computes eager attention (``RunPlan.lean``), not on transformers' modeling."""
        return False


def moe_layers(c: dict) -> Optional[list[int]]:
    """The layers with experts, where a Llama-4 config says (``moe_layers``, else every
    ``interleave_moe_layer_step``-th layer, the others dense MLPs of ``intermediate_size_mlp``); None
    where the config does not say (every layer, or a rule of its own: Qwen3-MoE's ``decoder_sparse_step``).

    >>> moe_layers({"num_hidden_layers": 4, "interleave_moe_layer_step": 2}), moe_layers({"moe_layers": []})
    ([1, 3], [])
    """
    if c.get("moe_layers") is not None:
        return [int(i) for i in c["moe_layers"]]
    step = c.get("interleave_moe_layer_step")
    if step is None:
        return None
    step = int(step)
    check(step > 0, "model.path", f"config.json's interleave_moe_layer_step must be > 0, got {step}")
    return list(range(step - 1, int(c.get("num_hidden_layers") or 0), step))


class PrepareFn(Protocol):
    """The local checkpoint directory a run starts from (built and cached if needed)."""

    def __call__(self, cfg: ModelConfig, cache_dir: Path, *, log: Callable[[str], None]) -> Path: ...
