"""Generation: the narrow interface between trainer and sampler.

Token ids and sampling settings (one seed per prompt included) go in; token
ids, per-token behaviour log-probs, finish reasons and the policy version of
every token come out (``Generation``). A completion is a pure function of its
prompt, its seed and the weights (``noise.py``), whoever generates it. New
weights come in as named tensors with a version (``Generator.load_weights``),
between decode steps if need be. The trainer only ever sees ``Generator``; a
vLLM backend would implement the same protocol. The generator *process* lives
here too: ``worker`` (its main loop), ``pool`` (starting and stopping
generators, from the trainer's side), ``transport`` (torch.distributed
TCPStore + gloo, with timeouts) and ``weights`` (the push schema and flat
buckets). This package must not know about losses, tasks or the training loop.
"""
from scalerl.generation.interface import Generation, Generator, SamplingParams
from scalerl.generation.torch_sampler import TorchGenerator

__all__ = ["Generation", "Generator", "SamplingParams", "TorchGenerator"]
