"""Generation: the narrow interface between trainer and sampler.

Token ids and sampling settings (one seed per prompt included) go in; token
ids, per-token behaviour log-probs, finish reasons and the policy version of
every token come out (``Generation``). A completion is a pure function of its
prompt, its seed and the weights (``noise.py``), whoever generates it. The trainer only ever sees ``Generator``; a vLLM backend
would implement the same protocol (it needs CUDA, so it is not shipped until
it can be tested). This package must not know about losses or tasks.
"""
from scalerl.generation.interface import Generation, Generator, SamplingParams
from scalerl.generation.torch_sampler import TorchGenerator

__all__ = ["Generation", "Generator", "SamplingParams", "TorchGenerator"]
