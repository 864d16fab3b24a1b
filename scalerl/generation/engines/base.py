"""The generation-engine contract and the schema shared by the ``generation`` options."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import device, dtype

    from scalerl.generation.engines.interface import Generator


@dataclass
class GenerationConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""

    samples_policy: ClassVar[bool] = True
    """The engine samples from a ``Policy`` in its process (``EngineContext.policy``); False: it
    loads ``EngineContext.checkpoint`` itself, and a generator process needs no model of its own."""

    def model_shards(self) -> int:
        """Devices one engine shards the model over (vLLM's ``tensor_parallel_size``); 1: one device."""
        return 1

    def weight_plane(self) -> Optional[str]:
        """How the trainer's weights reach a remote engine (vLLM's ``weight_transfer``); None: the option has no choice."""
        return None


@dataclass(frozen=True)
class EngineContext:
    """What a generation engine is built from; ``train/setup.py`` fills it in."""

    policy: Any
    """The trainer's ``models.policy.Policy`` (an in-process engine samples from it)."""
    checkpoint: Path
    """The HF checkpoint directory the run started from (an out-of-process engine loads it;
    the trainer pushes its current weights right after, so a resumed run is exact)."""
    device: device
    body_dtype: dtype
    """dtype of the model body (the precision axis on top of ``model.dtype``)."""
    head_dtype: Optional[dtype]
    """dtype of the generator's logits (``precision``'s generator side); None: the body's."""
    seed: int
    round_to: Optional[dtype] = None
    """An in-process sampler with its own weights rounds every weight it loads to this dtype
    (``precision.generator_body=engine``: a serving engine's bf16 weights, docs/mismatch.md)."""


class BuildFn(Protocol):
    """The run's generator, holding the weights of ``ctx.checkpoint`` as version 0."""

    def __call__(self, ctx: EngineContext, *, cfg: GenerationConfig) -> Generator: ...
