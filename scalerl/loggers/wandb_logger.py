"""``logger=wandb``: one W&B run per arm, grouped by study.

Offline unless the user has W&B set up (WANDB_MODE set, WANDB_API_KEY, or an
api.wandb.ai entry in ~/.netrc): laptops and clusters without network still
get a complete local record, synced later with ``wandb sync``. The run id is
kept in the run directory so a resumed or requeued run continues the *same*
W&B run (many RL frameworks start a new one).

Every chart of a metric is drawn against compute (``define_metric`` with
``axis/compute`` as its step metric), the axis of the whole study; the
namespaces are ``scalerl.loggers.base.namespaced``'s. The run carries the
run's identity as config (``config_hash``, ``arm_hash``, ``loss_clamp``,
``axes``, ``study``: written by the launch layer) and its axes and study as
tags, so W&B can filter and group by them.
"""
from __future__ import annotations

import netrc
import os
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from scalerl.core.errors import check
from scalerl.loggers.base import LoggerConfig

MODES = ("auto", "offline", "online", "disabled")
X_AXIS = "axis/compute"
TAG_MAX = 64  # W&B rejects longer tags


def run_tags(config: dict, extra=()) -> list[str]:
    """The user's tags, then ``<axis>=<option>`` for every design axis and ``study=<study>``.
    >>> run_tags({"axes": {"loss": "cispo", "batch": "default"}, "study": "loss"}, ["mine"])
    ['mine', 'loss=cispo', 'batch=default', 'study=loss']
    """
    tags = [*extra, *(f"{k}={v}" for k, v in (config.get("axes") or {}).items())]
    if config.get("study"):
        tags.append(f"study={config['study']}")
    return [t[:TAG_MAX] for t in dict.fromkeys(str(t) for t in tags)]


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
        self.run_dir: Optional[Path] = None
        self.mode = resolve_mode(cfg.mode)

    def start(self, run_dir: Path, name: str, group: str, config: dict, run_id: Optional[str] = None):
        import wandb  # loaded only by runs that log: it adds seconds to every import of this module

        id_file = Path(run_dir) / "wandb_id"
        if run_id is None and id_file.exists():
            run_id = id_file.read_text().strip()
        self.run_id = run_id or secrets.token_hex(4)
        id_file.write_text(self.run_id)
        self.run_dir = Path(run_dir)
        self.run = wandb.init(
            project=self.cfg.project, entity=self.cfg.entity, group=self.cfg.group or group,
            name=name, id=self.run_id, resume="allow", config=config, dir=str(run_dir),
            mode=self.mode, tags=run_tags(config, self.cfg.tags), settings=wandb.Settings(silent=True),
        )
        self.run.define_metric(X_AXIS)
        for prefix in ("eval", "train", "progress"):
            self.run.define_metric(f"{prefix}/*", step_metric=X_AXIS)
        self.run.define_metric("eval/pass_rate", step_metric=X_AXIS, summary="max,last")
        return self.run_id

    def log(self, row: dict, step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)

    def finish(self) -> None:
        if self.run is None:
            return
        self.run.finish()
        if self.mode == "offline":
            print(f"[scalerl] W&B run saved offline; upload with: {self.sync_command()}")
        self.run = None

    def sync_command(self) -> str:
        """``wandb sync`` for every offline session of this run (a resumed run has several)."""
        return f"wandb sync {shlex.quote(str(self.run_dir))}/wandb/offline-run-*"
