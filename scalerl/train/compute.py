"""Compute accounting: the x-axis of every scaling curve.

compute (FLOPs) = 6·N·T_train + 2·N·T_gen   (Kaplan et al. 2020 estimate)
- N: parameters excluding the input embedding (a lookup, not a matmul);
  the LM head counts.
- T_train: tokens that entered a backward pass: each trained group's prompt
  once (its G completions share the prompt's keys/values) plus every
  completion token: 2·N forward + 4·N backward per token.
- T_gen: each prompt's prefill once per group plus every generated token,
  including groups later dropped by the data filter: 2·N per token.
- A mismatch correction other than ``none`` (docs/mismatch.md) adds its
  no-grad forward at the behaviour weights: 2·N·T_train more a step, so a
  corrected arm pays for it on the axis it is ranked on.
A row's last token is predicted but never fed (on either side nothing reads
its hidden state); it is counted all the same, the usual one-per-token
estimate, so the axis does not depend on that implementation detail.
Attention's sequence-length term is ignored (tiny for short contexts, and
the paper's axis is GPU-hours anyway). Held-out evaluation is not counted:
it is measurement, not training. FLOPs are the default fit axis because they
are reproducible; device-hours (wall × devices) are logged alongside.
"""
from __future__ import annotations

from torch import nn


def flop_params(model: nn.Module) -> int:
    """N: parameter count without the input embedding (unless tied to the head)."""
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    # ``is``: a model built on the meta device (``models/load.py``) has data_ptr 0 for every tensor.
    tied = head is not None and (head.weight is emb or (emb.device.type != "meta" and head.weight.data_ptr() == emb.data_ptr()))
    return total if tied else total - emb.numel()


def train_flops(n_params: int, tokens: int) -> float:
    return 6.0 * n_params * tokens


def gen_flops(n_params: int, tokens: int) -> float:
    return 2.0 * n_params * tokens
