"""Configuration: typed schemas, the ConfigStore, validation and derivation.

Owns the shape of a run's config and the one place it is checked
(``validate``). Must not import torch models or the training loop. To add an
axis option, see ``registry.py``; the schemas are registered automatically.
"""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scalerl.config.errors import ConfigError, check
from scalerl.config.schema import BatchConfig, Config, TrainConfig


def validate(cfg: DictConfig) -> Config:
    """Instantiate every dataclass (running their checks) plus cross-field checks.

    Raises ``ConfigError`` naming the key to fix.
    """
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except OmegaConfBaseException as e:  # missing value, wrong type, ...
        key = getattr(e, "full_key", None) or "config"
        raise ConfigError(str(key), str(e).splitlines()[0]) from None
    _cross_checks(obj)
    return obj


def _cross_checks(c: Config) -> None:
    # Interruptions must fit the model's context (prompt + budget + phrase + answer).
    max_pos = getattr(c.model, "max_position_embeddings", None)
    if max_pos is not None:
        need = c.length.max_new_tokens + getattr(c.length, "answer_budget", 0) + len(getattr(c.length, "phrase", "")) + 16
        check(need <= max_pos, "model.max_position_embeddings",
              f"{max_pos} is too small for the length budget (needs >= {need})")
    check(c.train.warmup_steps < c.train.steps, "train.warmup_steps",
          f"must be < train.steps={c.train.steps}, got {c.train.warmup_steps}")


__all__ = ["BatchConfig", "Config", "ConfigError", "TrainConfig", "check", "validate"]
