"""Atomic checkpoints: model, optimizer, scheduler, prompt sampler and run counters.

No RNG state is stored: every step's sampling seed is derived from (seed, rank,
step), so a resumed run draws exactly what it would have drawn. Written to a
temp file then renamed, so a kill mid-save leaves the previous
checkpoint intact; an unreadable newest checkpoint falls back to the one
before. A checkpoint is refused if any parameter is non-finite.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch


def ckpt_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(ckpt_dir(run_dir).glob("step_*.pt"))


def save_checkpoint(run_dir: Path, step: int, payload: dict, keep: int, model: torch.nn.Module) -> Path:
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise FloatingPointError(f"refusing to checkpoint non-finite parameters: {bad[:3]}")
    d = ckpt_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step_{step:08d}.pt"
    tmp = d / f".{path.name}.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_latest(run_dir: Path, log=print) -> dict | None:
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # truncated or corrupt file: try the previous one
            log(f"[scalerl] warning: unreadable checkpoint {path.name} ({e}); trying an older one")
    return None
