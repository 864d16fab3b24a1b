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


PLACEMENT = ("hydra.sweep", "hydra.run", "hydra.output_subdir", "hydra.runtime", "out_root")
"""Keys a study may not set: where outputs go is the command line's choice (``out_root=``), so a
study file someone sends you cannot write outside ``<out_root>/sweeps/<study>/``."""


def read_spec(path: Path) -> dict:
    """A study file's mapping; ConfigError naming the file for bad YAML, a non-mapping or a placement key."""
    try:
        spec = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError("sweep", f"study file {str(path)!r}{line} is not valid YAML"
                          f" ({str(getattr(e, 'problem', None) or e).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("sweep", f"cannot read study file {str(path)!r}: {e}") from None
    if not isinstance(spec, dict):
        raise ConfigError("sweep", f"study file {str(path)!r} must be a mapping with `grid` and/or `arms`")
    keys = [*(spec.get("grid") or {})] if isinstance(spec.get("grid") or {}, dict) else []
    for arm in spec.get("arms") or []:
        keys += [_key(str(o)) for o in (arm.get("overrides", []) if isinstance(arm, dict) else [])]
    placed = sorted({k for k in keys if k.startswith(PLACEMENT)})
    if placed:
        raise ConfigError("sweep", f"study file {str(path)!r} sets {', '.join(placed)}: a study cannot choose where"
                          " its outputs go", "remove it from the file; give out_root=... on the command line instead")
    return spec


def load_study(names: list[str]) -> tuple[str, list[list[str]]]:
    arms: list[list[str]] = [[]]
    for name in names:
        spec = read_spec(find_study(name))
        arms = [merge(a, b) for a in arms for b in expand_spec(spec)]
    return "+".join(Path(n).stem for n in names), arms


def merge(base: list[str], top: list[str]) -> list[str]:
    """Override lists combined; on the same key, ``top`` wins."""
    keys = {_key(o) for o in top}
    return [o for o in base if _key(o) not in keys] + list(top)
