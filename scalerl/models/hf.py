"""``model=hf``: any local Hugging Face checkpoint directory.

scalerl never downloads weights; ``model.path`` must already be on disk
(e.g. a node-local copy of an SFT'd 8B checkpoint).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING

from scalerl.core.errors import check
from scalerl.models.base import ModelConfig, WarmStartConfig


@dataclass
class HFModelConfig(ModelConfig):
    path: str = MISSING
    """Local checkpoint directory (config.json, weights, tokenizer)."""
    warmstart: WarmStartConfig = field(default_factory=lambda: WarmStartConfig(enabled=False))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.path), "model.path", "must point at a local HF checkpoint directory")


def prepare_hf(cfg: HFModelConfig, cache_dir: Path, *, log=print) -> Path:
    path = Path(cfg.path).expanduser()
    check((path / "config.json").exists(), "model.path",
          f"{str(path)!r} is not a local HF checkpoint directory (no config.json); scalerl never downloads weights")
    return path
