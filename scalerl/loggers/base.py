"""The logger contract and the shared schema."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from omegaconf import MISSING


@dataclass
class LoggerConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""


class Logger(Protocol):
    def start(self, run_dir: Path, name: str, group: str, config: dict, run_id: Optional[str] = None) -> Optional[str]:
        """Open (or resume) the run's record; returns its id, kept in checkpoints."""
        ...

    def log(self, row: dict, step: int) -> None: ...

    def finish(self) -> None: ...
