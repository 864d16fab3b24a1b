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

from scalerl.core.bounded import BoundedReadError, read_bounded
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
    explicit = [list(a.get("overrides") or []) for a in spec.get("arms") or []] or [[]]
    return [merge(e, c) for e in explicit for c in combos]


PLACEMENT = ("hydra.sweep", "hydra.run", "hydra.output_subdir", "hydra.runtime", "out_root")
"""Keys a study may not set: where outputs go is the command line's choice (``out_root=``), so a
study file someone sends you cannot write outside ``<out_root>/sweeps/<study>/``."""


MAX_STUDY_BYTES = 1 << 20
"""A study file lists axes and override sets: the largest in sweeps/ is under 2 kB."""
SPEC_KEYS = ("grid", "arms")
ARM_KEYS = ("name", "overrides")


def read_spec(path: Path) -> dict:
    """A study file's mapping; ConfigError naming the file (and the entry) for a FIFO or device,
    bad YAML, a shape other than ``grid: {key: [values]}`` / ``arms: [{name, overrides: [...]}]``,
    or a placement key."""
    try:
        spec = yaml.safe_load(read_bounded(path, MAX_STUDY_BYTES).decode()) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError("sweep", f"study file {str(path)!r}{line} is not valid YAML"
                          f" ({str(getattr(e, 'problem', None) or e).splitlines()[0]})") from None
    except BoundedReadError as e:
        raise ConfigError("sweep", f"cannot read study file {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("sweep", f"cannot read study file {str(path)!r}: {e}") from None
    _check_shape(spec, str(path))
    keys = [_key(str(k)) for k in spec.get("grid") or {}]
    for arm in spec.get("arms") or []:
        keys += [_key(o) for o in arm.get("overrides") or []]
    placed = sorted({k for k in keys if k.startswith(PLACEMENT)})
    if placed:
        raise ConfigError("sweep", f"study file {str(path)!r} sets {', '.join(placed)}: a study cannot choose where"
                          " its outputs go", "remove it from the file; give out_root=... on the command line instead")
    return spec


def _check_shape(spec, path: str) -> None:
    """The study's YAML has the shape ``expand_spec`` reads; else one ConfigError naming the entry."""
    def bad(where: str, why: str, fix: str) -> ConfigError:
        return ConfigError("sweep", f"study file {path!r}: {where} {why}", fix)

    if not isinstance(spec, dict):
        raise bad("the file", "must be a mapping with `grid` and/or `arms`", "see sweeps/loss.yaml and sweeps/loo.yaml")
    extra = [k for k in spec if k not in SPEC_KEYS]
    if extra:
        raise bad(f"`{extra[0]}`", f"is not a study key; a study has {list(SPEC_KEYS)}", "remove it")
    grid = spec.get("grid") or {}
    if not isinstance(grid, dict):
        raise bad("`grid`", f"must be a mapping of key: [values], got a {type(grid).__name__}",
                  "write it as grid: {loss: [cispo, dapo]}")
    for key, values in grid.items():
        if isinstance(values, list) and not values:
            raise bad(f"`grid.{key}`", "is an empty list, which expands to no arms", "give it at least one value")
        if isinstance(values, dict):
            raise bad(f"`grid.{key}`", "is a mapping; a grid key takes a value or a list of values",
                      f"write it as {key}: [a, b]")
    arms = spec.get("arms") or []
    if not isinstance(arms, list):
        raise bad("`arms`", f"must be a list of {{name, overrides: [...]}}, got a {type(arms).__name__}",
                  "write it as arms: [{overrides: [loss=dapo]}]")
    for i, arm in enumerate(arms):
        if not isinstance(arm, dict):
            raise bad(f"`arms[{i}]`", f"must be a mapping {{name, overrides: [...]}}, got {arm!r}",
                      f"write it as arms: [{{overrides: [{arm}]}}]")
        extra = [k for k in arm if k not in ARM_KEYS]
        if extra:
            raise bad(f"`arms[{i}].{extra[0]}`", f"is not an arm key; an arm has {list(ARM_KEYS)}", "remove it")
        overrides = arm.get("overrides") or []
        if not isinstance(overrides, list):
            raise bad(f"`arms[{i}].overrides`", f"must be a list of key=value strings, got {overrides!r}",
                      f"write it as overrides: [{overrides}]")
        for o in overrides:
            if not isinstance(o, str) or not ("=" in o or o.startswith("~")):
                raise bad(f"`arms[{i}].overrides`", f"holds {o!r}, not a key=value string", "write it as [loss=dapo]")


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
