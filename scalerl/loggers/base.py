"""The logger contract, the shared schema, and the one namespace of each kind of metric.

A logger mirrors ``metrics.jsonl`` and ``steps.jsonl``; ``namespaced`` decides the names it
logs under, once for every logger:
    axis/      the x-axes, logged with every record: step, compute (FLOPs), device_hours,
               tokens, epoch, wall_s; compute is the axis of the whole study (arXiv 2510.13786 §2)
    eval/      held-out results: pass_rate and pass_rate/<kind>
    train/     per-step training signals (loss, entropy, clip_frac, truncation_rate, ...)
    progress/  bookkeeping at each eval: prompts retired by NPR, NaN-skipped steps
An eval row's training averages are not logged again: they are train/ averaged.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from omegaconf import MISSING


@dataclass
class LoggerConfig:
    name: str = MISSING
    """The option's registry key, written by the config store."""


AXES = ("step", "compute", "device_hours", "tokens", "epoch", "wall_s")
PROGRESS = ("retired", "nan_skips")


def namespaced(kind: str, row: dict, axes: dict | None = None) -> dict:
    """The record a logger writes for an ``eval`` row (of metrics.jsonl) or a ``train`` step.

    ``axes``: the current x-axis values for a train step, which carries none of its own.
    >>> namespaced("eval", {"step": 5, "compute": 1e9, "pass_rate": 0.5, "pass_rate/add": 0.6, "loss": 0.1, "retired": 2})
    {'axis/step': 5, 'axis/compute': 1000000000.0, 'eval/pass_rate': 0.5, 'eval/pass_rate/add': 0.6, 'progress/retired': 2}
    >>> namespaced("train", {"loss": 0.1}, {"step": 6, "compute": 2e9})
    {'axis/step': 6, 'axis/compute': 2000000000.0, 'train/loss': 0.1}
    """
    values = {**(axes or {}), **row}
    out = {f"axis/{k}": values[k] for k in AXES if k in values}
    if kind == "eval":
        out.update({f"eval/{k}": v for k, v in row.items() if k.startswith("pass_rate")})
        out.update({f"progress/{k}": row[k] for k in PROGRESS if k in row})
    elif kind == "train":
        out.update({f"train/{k}": v for k, v in row.items() if k not in AXES})
    else:
        raise ValueError(f"kind must be 'eval' or 'train', got {kind!r}")
    return out


class Logger(Protocol):
    def start(self, run_dir: Path, name: str, group: str, config: dict, run_id: Optional[str] = None) -> Optional[str]:
        """Open (or resume) the run's record; returns its id, kept in checkpoints."""
        ...

    def log(self, row: dict, step: int) -> None: ...

    def finish(self) -> None: ...
