"""Small random mixture-of-experts checkpoints in Hugging Face format, built offline for ``model=hf``
(tests/test_hf_moe.py; a module meant as a library: no test imports another test).

Three architectures whose transformers routers differ where scalerl reads them:

- Qwen3-MoE (``Qwen3MoeTopKRouter``): softmax router, top-k renormalised only when
  ``norm_topk_prob`` (an attribute of the router), q/k norms in attention;
- Mixtral (``MixtralTopKRouter``): the same top-k router, always renormalised, and no
  ``norm_topk_prob`` attribute at all; experts counted by ``num_local_experts``;
- Llama-4 (``Llama4Router``): top-1 of independent sigmoids, returned as a dense (n, E) score
  matrix rather than top-k lists, and an always-on shared expert beside the routed ones. Not in
  ``ARCHS`` (the suite runs those through every entry-point test): tests/test_llama4_moe.py has its own.

Each has the char tokenizer of the embedded task, so it trains on ``task=arith`` as it is.
"""
from __future__ import annotations

from pathlib import Path

import torch

from scalerl.models.tokenizer import build_char_tokenizer
from scalerl.routing.metrics import set_differs

ARCHS = ("qwen3_moe", "mixtral")
SHAPE = dict(hidden=64, layers=2, heads=2, experts=4, top_k=2, expert_width=64)
"""hidden 64, 2 layers of 4 experts of width 64, 2 active per token."""
LLAMA4 = "llama4"
"""Llama-4's text model: ``SHAPE`` with 1 active expert per token (Scout's top-1) and a shared expert
of the experts' width; every layer has experts, the first with RoPE and q/k norms (chunked attention),
the second without (NoPE, full attention), as Scout alternates them."""


def shape(arch: str) -> dict:
    return {**SHAPE, "top_k": 1} if arch == LLAMA4 else SHAPE


def build_moe_dir(arch: str, out: Path, seed: int = 0) -> Path:
    """Write a random-init ``arch`` checkpoint of ``shape(arch)`` and the char tokenizer to ``out``."""
    import transformers

    tok = build_char_tokenizer()
    s = shape(arch)
    common = dict(vocab_size=len(tok), hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["heads"], head_dim=s["hidden"] // s["heads"],
                  num_experts_per_tok=s["top_k"], max_position_embeddings=128, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False,
                  output_router_logits=False, router_aux_loss_coef=0.0)
    if arch == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(num_experts=s["experts"], moe_intermediate_size=s["expert_width"],
                                             intermediate_size=s["top_k"] * s["expert_width"], norm_topk_prob=True,
                                             **common)
        cls = transformers.Qwen3MoeForCausalLM
    elif arch == "mixtral":
        config = transformers.MixtralConfig(num_local_experts=s["experts"], intermediate_size=s["expert_width"],
                                            **common)
        cls = transformers.MixtralForCausalLM
    elif arch == LLAMA4:
        config = transformers.Llama4TextConfig(num_local_experts=s["experts"], intermediate_size=s["expert_width"],
                                               intermediate_size_mlp=2 * s["expert_width"], interleave_moe_layer_step=1,
                                               no_rope_layers=[1, 0], use_qk_norm=True, **common)
        cls = transformers.Llama4ForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = cls(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return Path(out)


def active_params_by_hand(arch: str, vocab: int) -> int:
    """N of ``scalerl/train/compute.py`` for ``shape(arch)``, counted by hand (docs/outputs.md): per layer
    attention 4 x 64 x 64 = 16,384 (2 heads of 64 / 2 = 32, as many key-value heads), Qwen3's q/k
    norms 2 x 32 = 64 (Llama-4's are L2 norms, without weights), two RMSNorms 2 x 64 = 128, the router
    4 x 64 = 256, and 2 of the 4 experts (Llama-4: 1, plus its shared expert, which every token runs),
    each 3 x 64 x 64 = 12,288 (gate, up, down); then the final norm (64) and the head (vocab x 64).
    The input embedding is a lookup: not counted."""
    experts = 1 + 1 if arch == LLAMA4 else 2
    layer = 16_384 + (64 if arch == "qwen3_moe" else 0) + 128 + 256 + experts * 12_288
    return 2 * layer + 64 + vocab * 64


def assert_routed_as_recorded(used: torch.Tensor, recorded: torch.Tensor) -> None:
    """The trainer's experts ``used`` (N, T, L, k) are the generator's ``recorded`` ones at every
    position it recorded (-1: not recorded; ``recorded`` may be wider), and it recorded some."""
    rec = recorded[:, : used.shape[1]]
    ok = (rec >= 0).all(-1)
    assert ok.any() and not set_differs(used.long(), rec.long())[ok].any()
