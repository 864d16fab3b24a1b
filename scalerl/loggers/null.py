"""``logger=none``: metrics.jsonl only."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.loggers.base import LoggerConfig


@dataclass
class NoLoggerConfig(LoggerConfig):
    pass


class NullLogger:
    run_id = None

    def __init__(self, cfg: NoLoggerConfig):
        self.cfg = cfg

    def start(self, run_dir, name, group, config, run_id=None):
        return None

    def log(self, row: dict, step: int) -> None:
        pass

    def finish(self) -> None:
        pass
