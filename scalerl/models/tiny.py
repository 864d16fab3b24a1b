"""The embedded default model: a tiny Llama-style causal LM, built offline.

It is an ordinary Hugging Face checkpoint directory (``config.json``,
``model.safetensors``, tokenizer files), so it loads through exactly the same
code path as any local checkpoint (see ``load.py``). Sizes follow
``shared/TINY_RL.md``: a few layers of width 64-128 learn 3-digit addition by
RL in CPU-minutes.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.models.tokenizer import build_char_tokenizer


def build_tiny_checkpoint(
    out_dir: str | Path,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    seed: int,
) -> Path:
    """Write a randomly initialised tiny Llama + char tokenizer to ``out_dir``."""
    out = Path(out_dir)
    tok = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
