"""Run identity: a run directory is named by human tags plus a short hash of
its resolved config, so relaunching the same command finds the same
directory, and a sweep can tell done, running, failed and pending arms apart
without any database.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from scalerl.config.groups import BOOKKEEPING_GROUPS, run_axes
from scalerl.core.hashing import stable_hash
from scalerl.core.jsonio import read_json
from scalerl.train.signals import STOP_REQUEST

# Keys that do not change what a run computes: bookkeeping, logging, hardware.
HASH_EXCLUDE_TOP = ("hydra", "study", "sweep", "out_root", "cache_dir", "recipe", *BOOKKEEPING_GROUPS)
HASH_EXCLUDE_TRAIN = ("threads", "device", "gpus")
TAG_SKIP = re.compile(r"^(hydra[./]|study=|sweep=|logger|out_root=|cache_dir=|train\.(threads|device|gpus)=)")
HEARTBEAT_S = 300  # a running arm whose progress.json is older than this is treated as dead


def hashable(cfg: DictConfig, *, with_seed: bool = True) -> dict:
    keys = [k for k in cfg.keys() if k not in HASH_EXCLUDE_TOP and (with_seed or k != "seed")]
    plain = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    for k in HASH_EXCLUDE_TRAIN:
        plain.get("train", {}).pop(k, None)
    return plain


def config_hash(cfg: DictConfig) -> str:
    return stable_hash(hashable(cfg))


def arm_hash(cfg: DictConfig) -> str:
    """Hash without the seed: runs sharing it are seeds of one arm."""
    return stable_hash(hashable(cfg, with_seed=False))


def tags(overrides) -> str:
    kept = [o.lstrip("+~") for o in overrides if not TAG_SKIP.match(o.lstrip("+~"))]
    text = ",".join(kept) or "default"
    text = re.sub(r"[^A-Za-z0-9=,._-]+", "_", text)
    return text[:80]


def run_name(root: DictConfig) -> str:
    """``<tags>-<hash>``; the OmegaConf resolver behind hydra.run.dir / sweep.subdir."""
    overrides = OmegaConf.select(root, "hydra.overrides.task", default=[]) or []
    return f"{tags(list(overrides))}-{config_hash(root)}"


def register_resolver() -> None:
    """``${scalerl_run_name:}`` in hydra.run.dir / hydra.sweep.subdir (idempotent)."""
    if not OmegaConf.has_resolver("scalerl_run_name"):
        OmegaConf.register_new_resolver("scalerl_run_name", lambda *, _root_: run_name(_root_), use_cache=False)


def sweep_run_dir(cfg: DictConfig) -> Path:
    """Where one arm of a sweep runs: ``hydra.sweep.dir / hydra.sweep.subdir`` of its composed config."""
    return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)


def axes(cfg) -> dict:
    return {a: str(OmegaConf.select(cfg, f"{a}.name")) for a in run_axes()}


def arm_state(run_dir: Path) -> str:
    """done | failed | stopped_early | running | interrupted | pending, from the run's own files."""
    run_dir = Path(run_dir)
    summary = read_json(run_dir / "summary.json") or {}
    if summary.get("status") in ("done", "failed", "stopped_early"):
        return summary["status"]
    if (run_dir / STOP_REQUEST).exists():  # stopped by the sweep; the run may not have seen it yet
        return "stopped_early"
    progress = read_json(run_dir / "progress.json") or {}
    if progress.get("status") == "running" and time.time() - progress.get("updated_at", 0) < HEARTBEAT_S:
        return "running"
    if (run_dir / "checkpoints").exists() or progress:
        return "interrupted"
    return "pending"
