"""Models for the GPU tests and benchmarks, built from a config (no download)."""
from __future__ import annotations

from pathlib import Path

import torch
import transformers

from scalerl.models.tokenizer import build_char_tokenizer


def qwen2_05b_config(vocab_size: int = 151936, small: bool = False) -> transformers.Qwen2Config:
    """The shape of Qwen2.5-0.5B: 24 layers, width 896, 14 query / 2 KV heads, tied embeddings
    (about 494M parameters). ``small``: 2 layers of width 128 (to smoke-test scripts on a CPU)."""
    width, ffn, layers, heads = (128, 256, 2, 4) if small else (896, 4864, 24, 14)
    return transformers.Qwen2Config(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1e6,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def build_random_qwen2(out: Path, dtype: torch.dtype = torch.bfloat16, seed: int = 0, small: bool = False) -> Path:
    """A randomly initialised Qwen2-style ~0.5B checkpoint directory with scalerl's char tokenizer
    (its ids are a prefix of the large vocabulary; pad/bos/eos are 0/1/2 in both)."""
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = transformers.Qwen2ForCausalLM(qwen2_05b_config(small=small)).to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
