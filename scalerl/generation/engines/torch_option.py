"""``generation=torch``: the default, an in-process batched KV-cache sampler in plain
torch + transformers (``torch_engine.py``). It samples from the trainer's own
model object, so a push only moves the version (and copies tensors that are not
already the model's). Fastest for the embedded tiny model, where Python overhead
per decode step dominates and a separate engine process would only add transfers."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.generation.engines.base import EngineContext, GenerationConfig


@dataclass
class TorchGenerationConfig(GenerationConfig):
    pass


def build_torch_generator(ctx: EngineContext, *, cfg: TorchGenerationConfig):
    from scalerl.generation.engines.torch_engine import TorchGenerator  # transformers: only when a run builds it

    return TorchGenerator(ctx.policy, ctx.device, round_to=ctx.round_to)
