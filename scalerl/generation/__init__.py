"""Generation (config group ``generation``): the narrow interface between trainer and sampler.

Token ids and sampling settings (one seed per prompt included) go in; token
ids, per-token behaviour log-probs, finish reasons and the policy version of
every token come out (``Generation``). A completion is a pure function of its
prompt, its seed and the weights, whoever generates it. New weights go in as
named tensors with a version (``Generator.load_weights``), between decode steps
if need be. The trainer only ever sees ``Generator``; which engine is behind it
is the option (``GENERATORS``).

Three subpackages, imported one way (``tests/test_layers.py`` checks it):

- ``transfer/`` (bottom): how bytes cross a process boundary: the message wire
  format, gloo groups whose ends prove the run's secret, the weight push's flat
  buckets, and vLLM's weight-transfer planes (inline, gloo, the trainer's side of NCCL);
- ``engines/``: the ``Generator`` interface and its engines (torch, vLLM), one
  option module each, and the ``GENERATORS`` registry;
- ``fleet/`` (top): generator *processes* for ``async=pipeline_rl``: the pool the
  trainer starts and feeds, the worker's main loop, the control link and heartbeats;
  ``worker.py`` here is only its command-line name, ``python -m scalerl.generation.worker``.

Code outside this package imports a subpackage's ``__init__`` (its interface),
never a module inside it. This package must not know about losses, tasks or the
training loop.
"""
from scalerl.generation.engines import GENERATORS, Generation, Generator, SamplingParams

__all__ = ["GENERATORS", "Generation", "Generator", "SamplingParams"]
