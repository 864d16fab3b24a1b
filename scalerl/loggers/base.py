from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class LoggerConfig:
    name: str = MISSING
