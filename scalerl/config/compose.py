"""Composing a run config the way the command line does, and turning Hydra's
composition errors into a ``ConfigError`` that names the key to fix."""
from __future__ import annotations

import dataclasses
import difflib
import re

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ReadonlyConfigError

from scalerl.config.groups import OPTION_GROUPS
from scalerl.config.store import register_schemas
from scalerl.core.errors import ConfigError
from scalerl.core.paths import conf_dir


def compose(overrides: list[str] | None = None) -> DictConfig:
    """The run config for ``overrides``, composed exactly as the command line does
    (without launching anything and without the ``hydra`` node)."""
    register_schemas()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))


def _keys_of(cause) -> list[str]:
    """The keys of the node an attribute error was raised on (sorted; [] if unknown)."""
    node = getattr(cause, "parent_node", None)
    if node is None:
        schema = getattr(cause, "object_type", None)
        return sorted(f.name for f in dataclasses.fields(schema)) if dataclasses.is_dataclass(schema) else []
    try:
        return sorted(str(k) for k in node.keys())
    except Exception:
        return []


def as_config_error(exc: Exception) -> ConfigError:
    """A Hydra or OmegaConf composition error, as one line that names the key."""
    inner = _config_error_in_chain(exc)  # our check, wrapped by Hydra (a plugin's __init__: InstantiationException)
    if inner is not None:
        return inner
    cause = exc.__cause__
    composed = _in_composition(exc)
    if composed is not None:
        return composed
    key = getattr(cause, "full_key", None)
    if isinstance(exc, (MissingConfigException, ConfigCompositionException)):
        found = re.search(r"Could not find '([\w/]+)/([^'/]+)'", str(exc))
        if found and found.group(1) in OPTION_GROUPS:
            group, name = found.groups()
            return ConfigError(group, f"unknown option {name!r}; choose from {sorted(OPTION_GROUPS[group])}")
        if found and (conf_dir() / found.group(1)).is_dir():     # a preset group such as recipe
            group, name = found.groups()
            known = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
            return ConfigError(group.replace("/", "."), f"unknown option {name!r}; choose from {known}")
    if key and isinstance(cause, ReadonlyConfigError) and key.endswith(".name"):
        group = key.rsplit(".", 1)[0]
        return ConfigError(key, f"is set by choosing the option (`{group}=<option>`), not by overriding the name")
    if key and isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        group, leaf = key.split(".", 1)[0], key.rsplit(".", 1)[-1]
        schema = getattr(cause, "object_type", None)
        option = next((n for n, o in OPTION_GROUPS.get(group, {}).items() if o.schema is schema), None)
        where = f"{group}={option}" if option else (getattr(schema, "__name__", None) or group)
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        known = _keys_of(cause)
        close = difflib.get_close_matches(leaf, known, n=1)
        if schema is None or schema is dict:          # a mapping (task.mix): its keys are the choices
            return ConfigError(key, f"`{leaf}` is not one of {parent or 'the config'}'s keys {known}",
                               f"did you mean `{parent}.{close[0]}`?" if close else f"use one of {known}")
        fix = f"did you mean `{parent + '.' if parent else ''}{close[0]}=...`?" if close else (
            f"the settings there are {known}" if known else None)
        return ConfigError(key, f"`{leaf}` is not a setting of {where}", fix)
    if key:
        return ConfigError(key, str(cause).splitlines()[0])
    if isinstance(exc, OverrideParseException):
        override = getattr(exc, "override", "")
        return ConfigError(override.lstrip("+~").split("=", 1)[0] or "overrides",
                           f"cannot parse `{override}`: {str(exc).splitlines()[0]}",
                           "write it as key=value; lists as [a,b] (https://hydra.cc/docs/advanced/override_grammar/basic)")
    if isinstance(exc, (ConfigCompositionException, MissingConfigException)):
        return ConfigError("overrides", " ".join(str(exc).split("\n", 2)[:2]).strip())
    return ConfigError("config", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _config_error_in_chain(exc: BaseException) -> ConfigError | None:
    """The first ConfigError among ``exc`` and its causes (Hydra wraps what a plugin raises)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ConfigError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _in_composition(exc: BaseException) -> ConfigError | None:
    """Composition errors whose first line alone names no key: an option left empty (``loss=``),
    and a list of options of one group (``loss=[cispo,dapo]``: Hydra merges them, and their
    schemas clash), each named by its group with the reason."""
    text = str(exc)
    empty = re.search(r"Could not find '([\w/]+)/'", text)
    if empty and empty.group(1) in OPTION_GROUPS:
        group = empty.group(1)
        return ConfigError(group, f"no option given; choose from {sorted(OPTION_GROUPS[group])}",
                           f"write it as `{group}=<option>`, e.g. `{group}={sorted(OPTION_GROUPS[group])[0]}`")
    merged = re.match(r"In '(?:schema/)?([\w/]+)/[^']+': (\w+) raised while composing config:\s*\n\s*(.+)", text)
    if merged and merged.group(1) in OPTION_GROUPS:
        group, reason = merged.group(1), merged.group(3).strip()
        if "is not a subclass of" in reason:
            return ConfigError(group, "takes one option, and a list of options merges several whose settings clash "
                               f"({reason.split('. value:')[0]})", f"choose one (`{group}=<option>`); to compare "
                               f"several, run a sweep: `-m {group}=a,b`")
        return ConfigError(group, f"{merged.group(2)}: {reason}")
    return None
