"""Generation (config group ``generation``): the narrow interface between trainer and sampler.

Token ids and sampling settings (one seed per prompt included) go in; token
ids, per-token behaviour log-probs, finish reasons and the policy version of
every token come out (``interface.Generation``). A completion is a pure function
of its prompt, its seed and the weights (``noise.py``), whoever generates it. New
weights go in as named tensors with a version (``Generator.load_weights``),
between decode steps if need be. The trainer only ever sees ``Generator``; which
engine is behind it is the option:

- ``torch``: in-process batched KV-cache sampler over the trainer's own model
  (``torch_engine.py``), the default for the embedded model;
- ``vllm``: a vLLM engine in its own processes (``vllm_engine.py``, weight pushes in
  ``vllm_transfer.py`` and ``vllm_gloo.py``), the paper's generator. Only those modules import
  vLLM; ``vllm_nccl.py``, the trainer's side of vLLM's NCCL plane, speaks its format without it.

An option is ``fn(ctx, *, cfg) -> Generator`` (``BuildFn`` in ``base.py``); its module
holds the schema and must not import torch, transformers or vLLM at module level.

The generator *process* of ``async=pipeline_rl`` lives here too: ``worker`` (its
main loop), ``pool`` (starting and stopping generators, from the trainer's side),
``transport`` (torch.distributed TCPStore + gloo, with timeouts) and ``buckets``
(the push schema and flat buckets). This package must not know about losses,
tasks or the training loop.
"""
from scalerl.core.option import Option
from scalerl.generation import torch_option, vllm_option
from scalerl.generation.interface import Generation, Generator, SamplingParams

GENERATORS: dict[str, Option] = {
    "torch": Option(torch_option.TorchGenerationConfig, torch_option.build_torch_generator),
    "vllm": Option(vllm_option.VLLMGenerationConfig, vllm_option.build_vllm_generator),
}

__all__ = ["GENERATORS", "Generation", "Generator", "SamplingParams"]
