"""Study files (``sweeps/*.yaml``): sweeps are data.

A study lists only what it varies, as a Cartesian ``grid`` and/or an explicit
list of ``arms`` (override sets, e.g. the leave-one-out study, which is not a
product). ``sweep=[loss,seeds]`` crosses several files. Command-line
overrides are crossed with the study's arms and win on conflicts.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from scalerl.core.errors import ConfigError
from scalerl.core.paths import sweeps_dir


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def find_study(name: str) -> Path:
    path = Path(name) if name.endswith((".yaml", ".yml")) else sweeps_dir() / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in sweeps_dir().glob("*.yaml"))
        raise ConfigError("sweep", f"no study file {str(path)!r}; known studies: {known}")
    return path


def expand_spec(spec: dict) -> list[list[str]]:
    """One study file -> its arms, each a list of override strings."""
    grid = spec.get("grid") or {}
    combos = [[]]
    if grid:
        keys = list(grid)
        combos = [[f"{k}={_value(v)}" for k, v in zip(keys, vals)]
                  for vals in itertools.product(*(grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys))]
    explicit = [list(a.get("overrides", [])) for a in spec.get("arms") or []] or [[]]
    return [merge(e, c) for e in explicit for c in combos]


def load_study(names: list[str]) -> tuple[str, list[list[str]]]:
    arms: list[list[str]] = [[]]
    for name in names:
        spec = yaml.safe_load(find_study(name).read_text()) or {}
        arms = [merge(a, b) for a in arms for b in expand_spec(spec)]
    return "+".join(Path(n).stem for n in names), arms


def merge(base: list[str], top: list[str]) -> list[str]:
    """Override lists combined; on the same key, ``top`` wins."""
    keys = {_key(o) for o in top}
    return [o for o in base if _key(o) not in keys] + list(top)
