"""Generation engines: what samples the tokens, behind one ``Generator`` interface.

Token ids and sampling settings go in (``SamplingParams``); token ids, per-token
behaviour log-probs, finish reasons and the policy version of every token come
out (``Generation``, ``interface.py``). Sampling noise is a pure function of
(prompt seed, sample index, token position) (``noise.py``), so a completion does
not depend on the rank or batch slot that generates it. The options
(``GENERATORS``, config group ``generation``):

- ``torch``: in-process batched KV-cache sampler over a ``Policy``
  (``torch_engine.py``), the default for the embedded model;
- ``vllm``: a vLLM engine in its own processes (``vllm_engine.py``), the paper's
  generator; it is the only module here that imports vLLM, and its weight pushes
  go through ``scalerl.generation.transfer``.

To add an engine: ``<name>_option.py`` holding its schema (a ``GenerationConfig``)
and ``fn(ctx, *, cfg) -> Generator`` (``BuildFn`` in ``base.py``), which must not
import torch, transformers or vLLM at module level (config composition imports
it), the engine module it builds lazily, ``conf/generation/<name>.yaml``, and the
entry below. Engines know nothing of generator processes (``fleet/``) or training.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from scalerl.core.option import Option
from scalerl.generation.engines import torch_option, vllm_option
from scalerl.generation.engines.base import EngineContext
from scalerl.generation.engines.interface import (LEFT_PADDED, Generation, Generator, SamplingParams, cat_generations,
                                                  pad_columns)
from scalerl.generation.engines.noise import mix_seed

if TYPE_CHECKING:
    from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad

GENERATORS: dict[str, Option] = {
    "torch": Option(torch_option.TorchGenerationConfig, torch_option.build_torch_generator),
    "vllm": Option(vllm_option.VLLMGenerationConfig, vllm_option.build_vllm_generator),
}

_TORCH_ENGINE = ("TorchGenerator", "left_pad")


def __getattr__(name: str):
    # PEP 562: the in-process engine loads torch and transformers, and config composition
    # imports this package, so its names are read from torch_engine only when first used.
    if name in _TORCH_ENGINE:
        from scalerl.generation.engines import torch_engine
        return getattr(torch_engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GENERATORS", "LEFT_PADDED", "EngineContext", "Generation", "Generator", "SamplingParams", "TorchGenerator",
           "cat_generations", "left_pad", "mix_seed", "pad_columns"]
