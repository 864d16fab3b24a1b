"""Run identity: a run directory is named by human tags plus a short hash of
its resolved config, so relaunching the same command finds the same
directory, and a sweep can tell done, running, failed and pending arms apart
without any database.

Sweep identity follows the same idea: a sweep launched without ``study=`` gets
a home named from its own overrides (``default_study``), so one command always
finds its home again and two different commands never share one. A finished
run is found by its config hash wherever it ran (``find_finished``) and linked
into a new study instead of being trained again (``link_run``).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from scalerl.config.groups import BOOKKEEPING_GROUPS, run_axes
from scalerl.core.hashing import stable_hash
from scalerl.core.jsonio import read_json
from scalerl.core.liveness import process_alive
from scalerl.train.signals import STOP_REQUEST

# Keys that do not change what a run computes: bookkeeping, logging, hardware.
HASH_EXCLUDE_TOP = ("hydra", "study", "sweep", "out_root", "cache_dir", "recipe", *BOOKKEEPING_GROUPS)
HASH_EXCLUDE_NESTED = {"train": ("threads", "device", "gpus"),
                       "async": ("timeout_s", "generator_threads", "external_generators", "generator_nodes")}
HASH_NEUTRAL = {"routing": {"name": "none"}}
"""Groups added after runs were hashed, left out of the hash at the value that computes what those runs
computed (``routing=none``: the trainer routes itself, as every run did), so they still count as finished."""
TAG_SKIP = re.compile(r"^(hydra[./]|study=|sweep=|logger|out_root=|cache_dir=|train\.(threads|device|gpus)=|"
                      r"async\.(timeout_s|generator_threads|external_generators|generator_nodes)=)")
HEARTBEAT_S = 300  # a run on another host whose progress.json is older than this is treated as dead
LIVE_STATUSES = ("starting", "running")


def hashable(cfg: DictConfig, *, with_seed: bool = True) -> dict:
    keys = [k for k in cfg.keys() if k not in HASH_EXCLUDE_TOP and (with_seed or k != "seed")]
    plain = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    for group, keys in HASH_EXCLUDE_NESTED.items():
        for k in keys:
            (plain.get(group) or {}).pop(k, None)
    for group, value in HASH_NEUTRAL.items():
        if plain.get(group) == value:
            plain.pop(group)
    return plain


def config_hash(cfg: DictConfig) -> str:
    return stable_hash(hashable(cfg))


RESUME_NEUTRAL = {"train": ("steps",)}
"""Keys a relaunch into the same run directory may change: the horizon (``train.steps``), so a
finished run goes on for more steps, or an interrupted one stops sooner. Anything else would
continue one config's weights under another's rows."""


def resumable(cfg: DictConfig) -> dict:
    """What a run directory's records were trained with: ``hashable`` less ``RESUME_NEUTRAL``."""
    plain = hashable(cfg)
    for group, keys in RESUME_NEUTRAL.items():
        for k in keys:
            (plain.get(group) or {}).pop(k, None)
    return plain


def run_identity(cfg: DictConfig) -> str:
    """The hash a run directory's checkpoints carry: ``config_hash`` less the horizon (``RESUME_NEUTRAL``)."""
    return stable_hash(resumable(cfg))


def arm_hash(cfg: DictConfig) -> str:
    """Hash without the seed: runs sharing it are seeds of one arm."""
    return stable_hash(hashable(cfg, with_seed=False))


def tags(overrides) -> str:
    kept = [o.lstrip("+~") for o in overrides if not TAG_SKIP.match(o.lstrip("+~"))]
    text = ",".join(kept) or "default"
    text = re.sub(r"[^A-Za-z0-9=,._-]+", "_", text)
    return text[:80]


def default_study(study_files: list[str], overrides: list[str]) -> str:
    """The study (and home ``outputs/sweeps/<study>/``) of a sweep launched without ``study=``.

    The study files it expands plus its other overrides, sorted, e.g. ``loss=cispo,dapo,gspo``
    or ``loss+train.steps=20``; bookkeeping overrides (launcher, logger, threads) do not count.
    """
    kept = sorted(o.lstrip("+~") for o in overrides if not TAG_SKIP.match(o.lstrip("+~")))
    text = re.sub(r"[^A-Za-z0-9=,._+-]+", "_", "+".join([*study_files, *kept])) or "default"
    return text if len(text) <= 80 else f"{text[:70]}-{stable_hash(text)}"


def find_finished(config_hash: str, roots: list[Path], exclude: Path | None = None) -> Path | None:
    """A finished run directory with this config hash in ``<root>/*/`` (a sweep's or the
    single runs' home) or ``<root>/*/*/`` (``outputs/sweeps/<study>/``), never a link."""
    skip = exclude.resolve() if exclude is not None else None
    for root in roots:
        for pattern in (f"*-{config_hash}", f"*/*-{config_hash}"):
            for path in sorted(Path(root).glob(pattern)):
                if path.is_symlink() or not path.is_dir() or path.resolve() == skip:
                    continue
                summary = read_json(path / "summary.json") or {}
                if summary.get("status") == "done" and summary.get("config_hash") == config_hash:
                    return path
    return None


def link_run(run_dir: Path, source: Path) -> None:
    """``run_dir`` becomes a relative link to the finished ``source`` (an empty folder there is replaced)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    if run_dir.is_dir() and not run_dir.is_symlink():
        run_dir.rmdir()                       # only an empty one: the caller checked
    os.symlink(os.path.relpath(source.resolve(), run_dir.parent.resolve()), run_dir, target_is_directory=True)


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


def _flat(obj, prefix: str = "") -> dict:
    if not isinstance(obj, dict):
        return {prefix: obj}
    out = {}
    for k, v in obj.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differing_keys(old: dict, new: dict) -> list[str]:
    """The dotted keys whose values differ between two ``hashable`` configs (present in one only included)."""
    a, b = _flat(old), _flat(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()


def has_records(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's progress: a checkpoint or a metric row."""
    metrics = Path(run_dir) / "metrics.jsonl"
    return any((Path(run_dir) / "checkpoints").glob("step_*")) or (metrics.exists() and metrics.stat().st_size > 0)


def foreign_run(run_dir: Path, cfg: DictConfig) -> str | None:
    """Why resuming ``cfg`` in ``run_dir`` would mix two runs, or None.

    A run directory belongs to one config: its ``config.yaml`` (written at every start)
    is the config its checkpoints and rows were trained with. A directory with nothing
    to resume, or without a readable ``config.yaml`` (a run from before scalerl wrote one),
    is not refused here; its checkpoints are still checked (``train/checkpoint.py``).
    """
    run_dir = Path(run_dir)
    if not has_records(run_dir):
        return None
    try:
        old = resumable(OmegaConf.load(run_dir / "config.yaml"))
    except Exception:  # missing or unreadable: nothing to compare with
        return None
    new = resumable(cfg)
    if stable_hash(old) == stable_hash(new):
        return None
    a, b, keys = _flat(old), _flat(new), differing_keys(old, new)
    # another option of a group (loss=dapo for loss=cispo) differs in its own fields too: name the option only
    swapped = {k[:-len(".name")] for k in keys if k.endswith(".name")}
    keys = [k for k in keys if k.endswith(".name") or k.rsplit(".", 1)[0] not in swapped]
    said = [f"{k} ({a.get(k, '<unset>')} -> {b.get(k, '<unset>')})" for k in keys]
    shown = ", ".join(said[:6]) + (f" and {len(said) - 6} more" if len(said) > 6 else "")
    return (f"{run_dir} holds a run of another config (hash {stable_hash(old)}, this one is {stable_hash(new)}; "
            f"they differ in {shown}); resuming would mix two runs, so nothing was changed")


def aside_path(run_dir: Path) -> Path:
    """Where ``--fresh`` moves a foreign run's files: a sibling directory that does not exist yet."""
    run_dir = Path(run_dir)
    n, path = 1, run_dir.with_name(f"{run_dir.name}.replaced")
    while path.exists():
        n += 1
        path = run_dir.with_name(f"{run_dir.name}.replaced-{n}")
    return path


def move_aside(run_dir: Path, keep: set[str]) -> Path:
    """Move every entry of ``run_dir`` but ``keep`` (the lock, Hydra's own files) to ``aside_path``."""
    run_dir = Path(run_dir)
    target = aside_path(run_dir)
    target.mkdir(parents=True)
    for entry in sorted(run_dir.iterdir()):
        if entry.name not in keep:
            os.replace(entry, target / entry.name)
    return target


def axes(cfg) -> dict:
    return {a: str(OmegaConf.select(cfg, f"{a}.name")) for a in run_axes()}


def summary_fields(cfg: DictConfig) -> dict:
    """What a run's summary says it is: its config hash (a finished run is reused by it), its
    identity (its checkpoints', the horizon left out), its arm (what its seeds share) and its axes."""
    return {"config_hash": config_hash(cfg), "run_identity": run_identity(cfg), "arm_hash": arm_hash(cfg),
            "axes": axes(cfg)}


def owner_alive(progress: dict) -> bool:
    """Whether the process that ``progress.json`` names is still training the run.

    On this host its pid (and start time, against a reused pid) settles it at once, so a
    killed run is relaunched at once; another host's process cannot be checked from here,
    so only its heartbeat (``updated_at``, every step) can tell.
    """
    if progress.get("status") not in LIVE_STATUSES:
        return False
    alive = process_alive(progress.get("pid"), progress.get("host"), progress.get("pid_start"))
    if alive is None:
        return time.time() - float(progress.get("updated_at") or 0) < HEARTBEAT_S
    return alive


def arm_state(run_dir: Path) -> str:
    """done | failed | stopped_early | running | interrupted | pending, from the run's own files."""
    run_dir = Path(run_dir)
    summary = read_json(run_dir / "summary.json") or {}
    if summary.get("status") in ("done", "failed", "stopped_early"):
        return summary["status"]
    if (run_dir / STOP_REQUEST).exists():  # stopped by the sweep; the run may not have seen it yet
        return "stopped_early"
    progress = read_json(run_dir / "progress.json") or {}
    if owner_alive(progress):
        return "running"
    if (run_dir / "checkpoints").exists() or progress:
        return "interrupted"
    return "pending"
