"""Study files (``sweeps/*.yaml``): sweeps are data.

A study lists only what it varies, as a Cartesian ``grid`` and/or an explicit
list of ``arms`` (override sets, e.g. the leave-one-out study, which is not a
product). ``sweep=[loss,seeds]`` crosses several files. Command-line
overrides are crossed with the study's arms and win on conflicts.

A study file is data (docs/studies.md): it sets recipe keys only, never
``hydra.*``, and is read in full and checked (size, nesting, duplicate keys,
shape, keys) before any arm is built; ``study_size`` counts its arms without
expanding them, for the sweep's cap (``scalerl.launch.expansion``).
"""
from __future__ import annotations

import itertools
import math
import re
import typing
from pathlib import Path

import yaml

from scalerl.core.bounded import BoundedReadError, read_bounded
from scalerl.core.errors import ConfigError
from scalerl.core.paths import sweeps_dir


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _roots(key: str) -> set[str]:
    """The top-level config nodes an override's key reaches: ``++hydra.job.env_set.X`` -> {hydra},
    ``hydra/launcher`` -> {hydra}, ``model@hydra.launcher`` -> {model, hydra} (a group's package)."""
    roots = set()
    for part in _key(key).strip().split("@"):
        part = part.strip().removeprefix("_global_").lstrip(".")
        roots.add(re.split(r"[./]", part, maxsplit=1)[0])
    return roots


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


def _grid_values(value) -> list:
    return value if isinstance(value, list) else [value]


def study_size(spec: dict) -> int:
    """How many arms ``expand_spec`` makes of a checked spec, counted without making them."""
    grid = spec.get("grid") or {}
    return math.prod(len(_grid_values(v)) for v in grid.values()) * len(spec.get("arms") or [None])


def expand_spec(spec: dict) -> list[list[str]]:
    """One study file -> its arms, each a list of override strings."""
    grid = spec.get("grid") or {}
    combos = [[]]
    if grid:
        keys = list(grid)
        combos = [[f"{k}={_value(v)}" for k, v in zip(keys, vals)]
                  for vals in itertools.product(*(_grid_values(grid[k]) for k in keys))]
    explicit = [list(a.get("overrides") or []) for a in spec.get("arms") or []] or [[]]
    return [merge(e, c) for e in explicit for c in combos]


PLACEMENT = ("hydra.sweep", "hydra.run", "hydra.output_subdir", "hydra.runtime", "out_root")
"""Keys a study may not set: where outputs go is the command line's choice (``out_root=``), so a
study file someone sends you cannot write outside ``<out_root>/sweeps/<study>/``."""

MAX_STUDY_BYTES = 1 << 20
"""A study file lists axes and override sets: the largest in sweeps/ is under 2 kB."""
MAX_DEPTH = 8
"""Nesting of mappings and lists a study may have: its deepest legal entry, an arm's override, is at
4 (file, ``arms``, the arm, ``overrides``); PyYAML builds nested nodes by recursion, so a file nested
thousands deep would end in a RecursionError before any shape check."""
SPEC_KEYS = ("grid", "arms")
ARM_KEYS = ("name", "overrides")
SCALARS = (str, int, float, bool, type(None))


class _DuplicateKey(Exception):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key, self.line = key, line


class _StudyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """``yaml.safe_load`` that refuses a mapping with the same key twice (PyYAML keeps the last one,
    so a study would silently lose an axis). libyaml's parser where PyYAML has it: the pure-Python
    one takes about 16 s on a 1 MB study, and a study from elsewhere may be that large."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                break                                   # SafeLoader's own error names it
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_depth(text: str, path: str) -> None:
    """Refuse nesting past ``MAX_DEPTH``, reading YAML events (an iterative parser, unlike the
    recursive composer) and stopping at the first level too deep."""
    depth = 0
    for event in yaml.parse(text, Loader=_StudyLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError("sweep", f"study file {path!r} line {event.start_mark.line + 1} nests mappings and "
                                  f"lists more than {MAX_DEPTH} deep; a study is `grid: {{key: [values]}}` and/or "
                                  "`arms: [{name, overrides: [...]}]`", "see sweeps/loss.yaml and sweeps/loo.yaml")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_spec(path: Path) -> dict:
    """A study file's mapping; ConfigError naming the file (and the entry) for a FIFO or device,
    bad YAML, nesting past ``MAX_DEPTH``, a duplicate key, a shape other than
    ``grid: {key: [values]}`` / ``arms: [{name, overrides: [...]}]``, or a key a study may not set."""
    try:
        text = read_bounded(path, MAX_STUDY_BYTES).decode()
        _check_depth(text, str(path))
        spec = yaml.load(text, Loader=_StudyLoader) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" line {where.line + 1}" if where is not None else ""
        raise ConfigError("sweep", f"study file {str(path)!r}{line} is not valid YAML"
                          f" ({str(getattr(e, 'problem', None) or e).splitlines()[0]})") from None
    except _DuplicateKey as e:
        raise ConfigError("sweep", f"study file {str(path)!r} line {e.line} gives the key `{e.key}` twice (YAML keeps "
                          "only the last)", "keep one; list several values as key: [a, b]") from None
    except BoundedReadError as e:
        raise ConfigError("sweep", f"cannot read study file {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("sweep", f"cannot read study file {str(path)!r}: {e}") from None
    _check_shape(spec, str(path))
    entries = {f"grid.{k}": [f"{k}={_value(v)}" for v in _grid_values(vs)] for k, vs in (spec.get("grid") or {}).items()}
    entries.update({f"arms[{i}].overrides": arm.get("overrides") or [] for i, arm in enumerate(spec.get("arms") or [])})
    for where, overrides in entries.items():
        for override in overrides:
            _check_key(override, str(path))
            _check_not_a_sweep(override, where, str(path))
    return spec


SWEEP_FUNCTIONS = re.compile(r"\s*((range|choice|glob|interval|tag)\s*\(|shuffle\s*\(\s*[^\s\[])")
"""Hydra's sweep functions; ``shuffle([a, b])`` of a plain list is a list, not a sweep."""


def _check_not_a_sweep(override: str, where: str, path: str) -> None:
    """An arm is one config: a comma list or ``range()`` in a study would reach the arm as Hydra's
    sweep syntax, refused late under the key ``overrides``; a study lists its values in ``grid``.
    Told from the text, not by Hydra's parser, which takes about 1 ms an override (a 1 MB study
    holds 10^5 of them)."""
    value = override.split("=", 1)[1] if "=" in override else ""
    if _top_level_comma(value) or SWEEP_FUNCTIONS.match(value):
        raise ConfigError("sweep", f"study file {path!r}: `{where}` holds {override!r}, a sweep over values; an arm "
                          "is one config", "list the values in the grid: grid: {key: [a, b]}")


def _top_level_comma(value: str) -> bool:
    """A comma outside quotes, brackets and parentheses, not escaped: Hydra's ``a,b`` choice (in one
    config, an error either way)."""
    depth, quote, escaped = 0, "", False
    for c in value:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            return True
    return False


def _check_key(override: str, path: str) -> None:
    """A study sets recipe keys only. ``hydra.*`` (any prefix, a ``hydra/`` group, a group placed
    ``@hydra``) is the command line's: through it a study would choose the arms' environment
    (``hydra.job.env_set.PYTHONPATH`` imports a file from anywhere), callbacks, launcher, sweeper or
    config search path, i.e. run code on the machine of whoever launches it."""
    key = _key(override).strip()
    roots = _roots(override)
    if any(key == p or key.startswith(p + ".") for p in PLACEMENT):
        raise ConfigError("sweep", f"study file {path!r} sets {key}: a study cannot choose where its outputs go",
                          "remove it from the file; give out_root=... on the command line instead")
    if "hydra" in roots:
        raise ConfigError("sweep", f"study file {path!r} sets {key}: a study sets recipe keys only, never hydra's "
                          "(its environment, callbacks, launcher, sweeper or search path would run code here)",
                          "remove it from the file; give hydra settings on the command line")
    if "sweep" in roots:
        raise ConfigError("sweep", f"study file {path!r} sets {key}: a study cannot include another study",
                          "remove it; cross studies on the command line: sweep=[a,b]")


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
        odd = [v for v in _grid_values(values) if not isinstance(v, SCALARS)]
        if odd:
            raise bad(f"`grid.{key}`", f"holds {odd[0]!r}; a grid value is a number, a string, a boolean or null",
                      f"give a list-valued setting in an arm: arms: [{{overrides: ['{key}=[...]']}}]")
    arms = spec.get("arms") if spec.get("arms") is not None else []
    if not isinstance(arms, list):
        raise bad("`arms`", f"must be a list of {{name, overrides: [...]}}, got a {type(arms).__name__}",
                  "write it as arms: [{overrides: [loss=dapo]}]")
    if "arms" in spec and not arms:
        raise bad("`arms`", "is an empty list, which expands to no arms", "give it at least one arm, or remove it")
    if not grid and not arms:
        raise bad("the file", "has no arms: it sets neither `grid` nor `arms`", "see sweeps/loss.yaml and sweeps/loo.yaml")
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


def read_studies(names: list[str]) -> list[dict]:
    """Each named study's checked spec (nothing expanded yet: ``study_size`` counts them first)."""
    return [read_spec(find_study(name)) for name in names]


def expand_studies(specs: list[dict]) -> list[list[str]]:
    """The Cartesian product of the studies' arms."""
    arms: list[list[str]] = [[]]
    for spec in specs:
        arms = [merge(a, b) for a in arms for b in expand_spec(spec)]
    return arms


def load_study(names: list[str]) -> tuple[str, list[list[str]]]:
    return "+".join(Path(n).stem for n in names), expand_studies(read_studies(names))


def merge(base: list[str], top: list[str]) -> list[str]:
    """Override lists combined; on the same key, ``top`` wins."""
    keys = {_key(o) for o in top}
    return [o for o in base if _key(o) not in keys] + list(top)
