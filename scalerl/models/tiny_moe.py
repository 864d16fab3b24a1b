"""``model=tiny_moe``: the embedded mixture of experts, a tiny Qwen3-MoE built offline like ``tiny``.

Qwen3-MoE (transformers' ``Qwen3MoeForCausalLM``) is the field's common RL MoE (Qwen3-30B-A3B):
a softmax router over E experts, the top k of them per token, renormalised (``norm_topk_prob``),
no shared expert. Each layer's dense MLP of ``tiny`` (intermediate 192) becomes 8 experts of
intermediate 96 with 2 active per token, so a token's active parameters equal ``tiny``'s (the
paper's dense-against-MoE comparison at equal active compute, arXiv 2510.13786 Table 1), and the
total is about 2.7 times them (docs/embedded.md has the counts).

The auxiliary load-balancing loss is off in RL (``output_router_logits`` false, the config's
default; nothing in the trainer adds ``router_aux_loss_coef`` x aux): the policy-gradient loss is
the only objective, as in the RL recipes that train Qwen3-MoE, and the experts' load is logged
instead (``routing_load_l*``, docs/outputs.md). The supervised warm start, a plain cross-entropy on
the logits, does not add it either.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scalerl.core.errors import check
from scalerl.core.lazy import torch, transformers
from scalerl.models.extensions import diagnose_broken_extensions
from scalerl.models.tiny import TinyModelConfig, build_cached
from scalerl.models.tokenizer import build_char_tokenizer


@dataclass
class TinyMoeModelConfig(TinyModelConfig):
    num_experts: int = 8
    experts_per_token: int = 2
    """The router's top k."""
    moe_intermediate_size: int = 96
    """Each expert's MLP width: k x this = ``tiny``'s dense intermediate_size, equal active parameters."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("num_experts", "experts_per_token", "moe_intermediate_size"):
            check(getattr(self, key) > 0, f"model.{key}", f"must be > 0, got {getattr(self, key)}")
        check(self.experts_per_token <= self.num_experts, "model.experts_per_token",
              f"must be <= model.num_experts={self.num_experts}, got {self.experts_per_token}")

    def scalerl_modeling(self) -> bool:
        return self.name == "tiny_moe"  # scalerl's own Qwen3-MoE module (models/qwen3_moe.py)

    def architecture(self) -> dict:
        # intermediate_size: every expert's width together, so the resource check sizes all the weights.
        return {**super().architecture(), "intermediate_size": self.num_experts * self.moe_intermediate_size,
                "num_experts": self.num_experts, "num_experts_per_tok": self.experts_per_token,
                "moe_intermediate_size": self.moe_intermediate_size}

    def build_kwargs(self) -> dict:
        return dict(hidden_size=self.hidden_size, num_layers=self.num_layers, num_heads=self.num_heads,
                    num_experts=self.num_experts, experts_per_token=self.experts_per_token,
                    moe_intermediate_size=self.moe_intermediate_size,
                    max_position_embeddings=self.max_position_embeddings, seed=self.init_seed)


def prepare_tiny_moe(cfg: TinyMoeModelConfig, cache_dir: Path, *, log=print) -> Path:
    """Build the random-init checkpoint once, cached by a hash of its config."""
    return build_cached(Path(cache_dir), "tiny_moe", cfg.build_kwargs(), build_tiny_moe_checkpoint, log=log,
                        what="tiny MoE model")


def build_tiny_moe_checkpoint(out_dir: str | Path, *, hidden_size: int, num_layers: int, num_heads: int,
                              num_experts: int, experts_per_token: int, moe_intermediate_size: int,
                              max_position_embeddings: int, seed: int) -> Path:
    """Write a randomly initialised tiny Qwen3-MoE + char tokenizer to ``out_dir``."""
    out = Path(out_dir)
    tok = build_char_tokenizer()
    config = transformers.Qwen3MoeConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=experts_per_token * moe_intermediate_size,  # unused: every layer is sparse
        moe_intermediate_size=moe_intermediate_size,
        num_experts=num_experts,
        num_experts_per_tok=experts_per_token,
        norm_topk_prob=True,  # Qwen3-30B-A3B's
        output_router_logits=False,  # no auxiliary load-balancing loss in RL (module docstring)
        router_aux_loss_coef=0.0,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    with diagnose_broken_extensions():
        model = transformers.Qwen3MoeForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
