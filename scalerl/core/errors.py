"""The one error type for bad configuration (it always names the key to fix), and the errors the
entry point reports without a traceback (here, not beside their raisers, so the sweep's parent
process need not import torch to catch them)."""
from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, key: str, message: str, fix: str | None = None):
        self.key = key
        self.reason = message
        fix = fix or f"fix it with `{key}=...` on the command line or in its YAML"
        self.fix = fix
        super().__init__(f"{key}: {message}  ({fix})")


def check(ok: bool, key: str, message: str) -> None:
    """Raise ``ConfigError(key, message)`` unless ``ok``."""
    if not ok:
        raise ConfigError(key, message)


class CheckpointsRefused(RuntimeError):
    """Checkpoints exist but none could be loaded; the message says what to do (train/checkpoint.py)."""
