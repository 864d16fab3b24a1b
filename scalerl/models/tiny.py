"""``model=tiny``: the embedded default, a tiny Llama-style causal LM built offline.

It is an ordinary Hugging Face checkpoint directory (``config.json``,
``model.safetensors``, tokenizer files), so it loads through exactly the same
code path as any local checkpoint (see ``load.py``). Its size follows our
measurements on a 2-core CPU (docs/embedded.md): a few layers of width 64-128
learn 3-digit addition by RL in CPU-minutes.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from scalerl.core.errors import check
from scalerl.core.hashing import stable_hash
from scalerl.core.lazy import torch, transformers
from scalerl.models.base import ModelConfig
from scalerl.models.extensions import diagnose_broken_extensions
from scalerl.models.tokenizer import build_char_tokenizer


VOCAB_BOUND = 128
"""An upper bound on the character tokenizer's vocabulary (``models/tokenizer.py``)."""


@dataclass
class TinyModelConfig(ModelConfig):
    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 3
    """3 heads of 32: vLLM's CPU attention supports head sizes 32, 64, 80, ... (docs/embedded.md)."""
    intermediate_size: int = 192
    max_position_embeddings: int = 256
    """Must cover prompt + budget + interruption phrase + answer budget."""
    init_seed: int = 0

    def context_length(self) -> int:
        return self.max_position_embeddings

    def size_key(self) -> str:
        return "model.hidden_size"

    def scalerl_modeling(self) -> bool:
        # This option's own Llama checkpoints only: an option built on this schema with another
        # architecture keeps transformers' modeling until it says otherwise.
        return self.name == "tiny"

    def architecture(self) -> dict:
        return dict(vocab_size=VOCAB_BOUND, hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
                    num_attention_heads=self.num_heads, num_key_value_heads=self.num_heads,
                    intermediate_size=self.intermediate_size, max_position_embeddings=self.max_position_embeddings,
                    tie_word_embeddings=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
            check(getattr(self, key) > 0, f"model.{key}", f"must be > 0, got {getattr(self, key)}")
        check(self.hidden_size % self.num_heads == 0, "model.hidden_size",
              f"must be divisible by model.num_heads={self.num_heads}, got {self.hidden_size}")
        check(self.hidden_size // self.num_heads % 2 == 0, "model.num_heads",
              f"model.hidden_size / model.num_heads must be even (rotary embeddings rotate pairs), "
              f"got {self.hidden_size} / {self.num_heads}")

    def identity(self, path: Path) -> object:
        """The build settings, not the cache path: the shipped warm start's key holds on every machine."""
        return self.build_kwargs()

    def build_kwargs(self) -> dict:
        return dict(hidden_size=self.hidden_size, num_layers=self.num_layers, num_heads=self.num_heads,
                    intermediate_size=self.intermediate_size,
                    max_position_embeddings=self.max_position_embeddings, seed=self.init_seed)


def prepare_tiny(cfg: TinyModelConfig, cache_dir: Path, *, log=print) -> Path:
    """Build the random-init checkpoint once, cached by a hash of its config."""
    return build_cached(Path(cache_dir), "tiny", cfg.build_kwargs(), build_tiny_checkpoint, log=log, what="tiny model")


def build_cached(cache_dir: Path, prefix: str, kw: dict, build, *, log, what: str) -> Path:
    """``build(out_dir, **kw)`` once into ``cache_dir/<prefix>-<hash of kw>``, under a file lock, by way of
    a temporary folder renamed at the end (a killed build leaves no half checkpoint behind)."""
    base = cache_dir / f"{prefix}-{stable_hash(kw)}"
    with FileLock(str(base) + ".lock"):
        if not (base / "model.safetensors").exists():
            log(f"[scalerl] building {what} -> {base}")
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            build(tmp, **kw)
            shutil.rmtree(base, ignore_errors=True)  # a partial copy from a killed build
            tmp.rename(base)
    return base


def build_tiny_checkpoint(out_dir: str | Path, *, hidden_size: int, num_layers: int, num_heads: int,
                          intermediate_size: int, max_position_embeddings: int, seed: int) -> Path:
    """Write a randomly initialised tiny Llama + char tokenizer to ``out_dir``."""
    out = Path(out_dir)
    tok = build_char_tokenizer()
    config = transformers.LlamaConfig(
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
    with diagnose_broken_extensions():
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
