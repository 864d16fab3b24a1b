"""``model=hf``: any local Hugging Face checkpoint directory.

scalerl never downloads weights; ``model.path`` must already be on disk
(e.g. a node-local copy of an SFT'd 8B checkpoint).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from omegaconf import MISSING

from scalerl.config.errors import check
from scalerl.launch.hashing import stable_hash
from scalerl.models.base import ModelConfig, WarmStartConfig


@dataclass
class HFModelConfig(ModelConfig):
    name: str = "hf"
    path: str = MISSING
    """Local checkpoint directory (config.json, weights, tokenizer)."""
    warmstart: WarmStartConfig = field(default_factory=lambda: WarmStartConfig(enabled=False))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.path), "model.path", "must point at a local HF checkpoint directory")


def prepare_hf(cfg: HFModelConfig, task_cfg, task, cache_dir: Path, log=print) -> Path:
    path = Path(cfg.path).expanduser()
    check((path / "config.json").exists(), "model.path",
          f"{str(path)!r} is not a local HF checkpoint directory (no config.json); scalerl never downloads weights")
    if not cfg.warmstart.enabled:
        return path
    from scalerl.models.tiny_option import _plain
    from scalerl.train.warmstart import cached_warm_start

    key = {"base": str(path.resolve()), "warmstart": asdict(cfg.warmstart), "task": _plain(task_cfg)}
    return cached_warm_start(path, Path(cache_dir) / f"warm-{stable_hash(key)}", cfg, task, log=log)
