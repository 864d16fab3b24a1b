"""``model=hf``: any local Hugging Face checkpoint directory.

scalerl never downloads weights; ``model.path`` must already be on disk, and
visible where the sweep is launched (it is checked before any arm starts).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import MISSING

from scalerl.core.errors import ConfigError, check
from scalerl.models.base import ModelConfig, WarmStartConfig


@dataclass
class HFModelConfig(ModelConfig):
    path: str = MISSING
    """Local checkpoint directory (config.json, weights, tokenizer)."""
    warmstart: WarmStartConfig = field(default_factory=lambda: WarmStartConfig(enabled=False))
    activation_checkpointing: bool = True
    """Real checkpoints' activations dominate the trainer's memory at the paper's lengths."""
    release_freed_memory: bool = True
    """Real checkpoints' freed activations would stay resident under their gradients (core/heap.py)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.path), "model.path", "must point at a local HF checkpoint directory")
        check_checkpoint_dir(self.path)

    def size_key(self) -> str:
        return "model.path"

    def architecture(self) -> Optional[dict]:
        """The checkpoint's ``config.json`` (a multimodal one's ``text_config``); None when unreadable."""
        try:
            c = json.loads((Path(self.path).expanduser() / "config.json").read_text()[:1 << 20])
        except (OSError, ValueError):
            return None
        return c.get("text_config", c) if isinstance(c, dict) else None


def check_checkpoint_dir(text: str) -> Path:
    """``model.path`` is a readable local HF checkpoint directory. Checked when the config is
    validated, so a sweep's --dry-run and its launch catch it before any arm starts (on SLURM
    the path must therefore be visible from the submitting node too, e.g. a shared filesystem)."""
    path = Path(text).expanduser()
    check(path.exists(), "model.path", f"{str(path)!r} does not exist; scalerl never downloads weights")
    check(path.is_dir(), "model.path", f"{str(path)!r} is a file, not a Hugging Face checkpoint directory")
    check((path / "config.json").is_file(), "model.path",
          f"{str(path)!r} is not a Hugging Face checkpoint directory (no config.json)")
    try:
        config = json.loads((path / "config.json").read_bytes())
    except (OSError, ValueError) as e:  # ValueError: not UTF-8 or not JSON
        raise ConfigError("model.path", f"{str(path / 'config.json')!r} is not a readable JSON file ({e})") from None
    check(isinstance(config, dict), "model.path", f"{str(path / 'config.json')!r} holds a {type(config).__name__}, "
                                                  "not a JSON object")
    return path


def check_hf_config(text: str) -> None:
    """``model.path``'s config.json as transformers reads it (field types included, e.g. an integer
    ``vocab_size``): before any process starts, not when the trainer loads the model a minute in."""
    path = check_checkpoint_dir(text)
    from transformers import AutoConfig  # heavy; only for model=hf, which loads it anyway

    try:
        AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as e:  # transformers raises many kinds (OSError, ValueError, its strict-dataclass errors)
        raise ConfigError("model.path", f"{str(path / 'config.json')!r}: transformers cannot read it: "
                                        f"{' '.join(str(e).split())[:400]}") from None


def prepare_hf(cfg: HFModelConfig, cache_dir: Path, *, log=print) -> Path:
    return check_checkpoint_dir(cfg.path)
