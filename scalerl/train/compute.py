"""Compute accounting: the x-axis of every scaling curve.

compute (FLOPs) = 6·N·T_train + 2·N·T_gen   (Kaplan et al. 2020 estimate)
- N: parameters excluding the input embedding (a lookup, not a matmul);
  the LM head counts. A mixture of experts counts its *active* parameters: each
  layer's experts at k/E of their total (a token runs k of the E experts), its
  router, shared expert, attention, norms and head in full (docs/outputs.md).
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
    """N: parameter count without the input embedding (unless tied to the head), an MoE's experts
    counted at the share of them a token runs (``inactive_expert_params``)."""
    total = sum(p.numel() for p in model.parameters()) - inactive_expert_params(model)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    # ``is``: a model built on the meta device (``models/load.py``) has data_ptr 0 for every tensor.
    tied = head is not None and (head.weight is emb or (emb.device.type != "meta" and head.weight.data_ptr() == emb.data_ptr()))
    return total if tied else total - emb.numel()


def train_flops(n_params: int, tokens: int) -> float:
    return 6.0 * n_params * tokens


def gen_flops(n_params: int, tokens: int) -> float:
    return 2.0 * n_params * tokens


def inactive_expert_params(model: nn.Module) -> int:
    """The expert parameters a token does not run: each experts block's (E - k) / E of its parameters,
    k = ``config.num_experts_per_tok`` of E = the block's ``num_experts`` (transformers' ``*Experts``
    modules, whose weights are (E, ...) tensors: Qwen3-MoE, Mixtral, Llama-4; scalerl's own Qwen3-MoE, E MLPs).
    0 for a dense model. Everything else counts in full: a shared expert (Qwen2-MoE's, Llama-4's), which
    every token runs, and the dense MLPs of the layers without experts (Llama-4's ``moe_layers``)."""
    k = getattr(text_config(model), "num_experts_per_tok", None)
    if not k:
        return 0
    out = 0
    for m in model.modules():
        e = getattr(m, "num_experts", None)
        if type(m).__name__.endswith("Experts") and e:
            n = sum(p.numel() for p in m.parameters())  # (E, ...) tensors, or E modules (models/qwen3_moe.py)
            out += n - n * int(k) // int(e)
    return out


def text_config(model: nn.Module) -> object:
    """The model's config, or its language model's where it has one (a multimodal Llama-4's ``text_config``)."""
    config = getattr(model, "config", None)
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config
