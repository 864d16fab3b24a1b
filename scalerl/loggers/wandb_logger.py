"""``logger=wandb``: one W&B run per arm, grouped by study.

Offline unless the user has W&B set up (WANDB_MODE set, WANDB_API_KEY, or an
api.wandb.ai entry in ~/.netrc): laptops and clusters without network still
get a complete local record, synced later with ``wandb sync``. The run id is
kept in the run directory so a resumed or requeued run continues the *same*
W&B run (many RL frameworks start a new one).
"""
from __future__ import annotations

import netrc
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from scalerl.core.errors import check
from scalerl.loggers.base import LoggerConfig

MODES = ("auto", "offline", "online", "disabled")


@dataclass
class WandbConfig(LoggerConfig):
    project: str = "scalerl"
    entity: Optional[str] = None
    mode: str = "auto"
    """auto: online only if W&B is configured on this machine, else offline."""
    group: Optional[str] = None
    """Defaults to the study name, so a sweep's arms share one group."""
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check(self.mode in MODES, "logger.mode", f"must be one of {MODES}, got {self.mode!r}")


def resolve_mode(mode: str) -> str:
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        if netrc.netrc().authenticators("api.wandb.ai"):
            return "online"
    except (OSError, netrc.NetrcParseError):
        pass
    return "offline"


class WandbLogger:
    def __init__(self, cfg: WandbConfig):
        self.cfg = cfg
        self.run = None
        self.run_id: Optional[str] = None
        self.mode = resolve_mode(cfg.mode)

    def start(self, run_dir: Path, name: str, group: str, config: dict, run_id: Optional[str] = None):
        import wandb  # loaded only by runs that log: it adds seconds to every import of this module

        id_file = Path(run_dir) / "wandb_id"
        if run_id is None and id_file.exists():
            run_id = id_file.read_text().strip()
        self.run_id = run_id or secrets.token_hex(4)
        id_file.write_text(self.run_id)
        self.run = wandb.init(
            project=self.cfg.project, entity=self.cfg.entity, group=self.cfg.group or group,
            name=name, id=self.run_id, resume="allow", config=config, dir=str(run_dir),
            mode=self.mode, tags=list(self.cfg.tags), settings=wandb.Settings(silent=True),
        )
        return self.run_id

    def log(self, row: dict, step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)

    def finish(self) -> None:
        if self.run is None:
            return
        run_dir = Path(self.run.dir).parent.parent if self.run.dir else None
        self.run.finish()
        if self.mode == "offline" and run_dir is not None:
            print(f"[scalerl] W&B run saved offline; upload with: wandb sync {run_dir}/wandb/offline-run-*")
        self.run = None
