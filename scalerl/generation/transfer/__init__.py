"""How bytes cross a process boundary, for the trainer and its generators.

- ``wire.py``: messages as JSON plus raw tensor bytes, never pickle, the store values signed
  under the run's secret, and the broadcast that carries buckets;
- ``trust.py``: who may connect: the run's secret and address, and gloo groups whose ends
  prove the secret to each other before anything else travels;
- ``buckets.py``: a weight push as named tensors in an agreed schema, streamed in
  flat buckets (docs/async.md);
- vLLM's weight-transfer planes: ``vllm_transfer.py`` (the inline backend and the
  vLLM plugin that registers both of ours), ``vllm_gloo.py`` (a gloo data plane for
  vLLM-CPU), ``vllm_reload.py`` (the worker-side reload lifecycle both share) and
  ``vllm_nccl.py`` (the trainer's side of vLLM's own NCCL plane, docs/vllm.md).

This is the bottom of ``scalerl.generation``: it imports neither the engines nor the
generator processes. Only the ``vllm_*`` modules other than ``vllm_nccl`` import vLLM,
and this ``__init__`` imports none of them, so the trainer never loads vLLM. To add a
data plane: a ``vllm_<name>.py`` engine registered in ``vllm_transfer.register`` and
named in ``generation.weight_transfer``'s options (``engines/vllm_option.py``).
"""
from scalerl.generation.transfer.buckets import BUCKET_BYTES, TensorSpec, weight_schema
from scalerl.generation.transfer.trust import SECRET_ENV
from scalerl.generation.transfer.wire import TransportError, decode, encode

__all__ = ["BUCKET_BYTES", "SECRET_ENV", "TensorSpec", "TransportError", "decode", "encode", "weight_schema"]
