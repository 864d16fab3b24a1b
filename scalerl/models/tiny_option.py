"""``model=tiny``: the embedded Llama-style model, built offline and cached."""
from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from scalerl.config.errors import check
from scalerl.launch.hashing import stable_hash
from scalerl.models.base import ModelConfig


@dataclass
class TinyModelConfig(ModelConfig):
    name: str = "tiny"
    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 4
    intermediate_size: int = 192
    max_position_embeddings: int = 256
    """Must cover prompt + budget + interruption phrase + answer budget."""
    init_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.hidden_size % self.num_heads == 0, "model.hidden_size",
              f"must be divisible by model.num_heads={self.num_heads}, got {self.hidden_size}")
        check(self.num_layers > 0, "model.num_layers", f"must be > 0, got {self.num_layers}")

    def build_kwargs(self) -> dict:
        return dict(hidden_size=self.hidden_size, num_layers=self.num_layers, num_heads=self.num_heads,
                    intermediate_size=self.intermediate_size,
                    max_position_embeddings=self.max_position_embeddings, seed=self.init_seed)


def prepare_tiny(cfg: TinyModelConfig, task_cfg, task, cache_dir: Path, log=print) -> Path:
    """Build the random-init checkpoint, then warm-start it; both cached by config hash."""
    from scalerl.models.tiny import build_tiny_checkpoint
    from scalerl.train.warmstart import cached_warm_start

    kw = cfg.build_kwargs()
    base = Path(cache_dir) / f"tiny-{stable_hash(kw)}"
    with FileLock(str(base) + ".lock"):
        if not (base / "model.safetensors").exists():
            log(f"[scalerl] building tiny model -> {base}")
            tmp = base.with_name(base.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            build_tiny_checkpoint(tmp, **kw)
            shutil.rmtree(base, ignore_errors=True)  # a partial copy from a killed build
            tmp.rename(base)
    if not cfg.warmstart.enabled:
        return base
    key = {"base": kw, "warmstart": asdict(cfg.warmstart), "task": _plain(task_cfg)}
    return cached_warm_start(base, Path(cache_dir) / f"warm-{stable_hash(key)}", cfg, task, log=log)


def _plain(obj):
    from omegaconf import OmegaConf

    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return OmegaConf.to_container(obj, resolve=True)
