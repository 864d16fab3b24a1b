"""The Optuna sweeper's search space, written the way Hydra's Optuna sweeper reads it.

Each override on the command line (or entry of ``hydra.sweeper.params``) is either fixed
for every trial (``train.steps=600``) or a dimension of the search:

    key=interval(lo, hi)             float, uniform           -> FloatDistribution(lo, hi)
    key=tag(log, interval(lo, hi))   float, log-uniform       -> FloatDistribution(lo, hi, log=True)
    key=int(interval(lo, hi))        integer (tag(log, ...) too) -> IntDistribution(lo, hi)
    key=choice(a, b, c)  or  a,b,c   categorical              -> CategoricalDistribution
    key=range(lo, hi[, step])        categorical over the range

A bad dimension (lo >= hi, a log scale through 0, an unknown tag) fails naming its key.
"""
from __future__ import annotations

import re

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

from scalerl.core.errors import ConfigError

_PLAIN = re.compile(r"^[A-Za-z0-9_./:+-]+$")


def format_value(value) -> str:
    """A sampled value as override text: ``1e-05``, ``true``, ``null``, ``small``, ``'a b'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    return text if _PLAIN.match(text) else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _distribution(key: str, value):
    import optuna.distributions as d

    if isinstance(value, IntervalSweep):
        unknown = set(value.tags) - {"log"}
        if unknown:
            raise ConfigError(key, f"unknown tag(s) {sorted(unknown)} on interval(...); only `log` is understood")
        lo, hi, log = value.start, value.end, "log" in value.tags
        if not lo < hi:
            raise ConfigError(key, f"interval({lo}, {hi}) is empty: need low < high")
        if log and lo <= 0:
            raise ConfigError(key, f"tag(log, interval({lo}, {hi})) needs low > 0")
        if isinstance(lo, int) and isinstance(hi, int):
            return d.IntDistribution(lo, hi, log=log)
        return d.FloatDistribution(float(lo), float(hi), log=log)
    if isinstance(value, (ChoiceSweep, RangeSweep)):
        if isinstance(value, ChoiceSweep):
            choices = list(value.list)
        else:  # range(start, stop, step), floats allowed
            choices, x = [], value.start
            while (value.step > 0 and x < value.stop) or (value.step < 0 and x > value.stop):
                choices.append(x)
                x += value.step
        if not choices:
            raise ConfigError(key, "the choice is empty")
        bad = [c for c in choices if not isinstance(c, (str, int, float, bool)) and c is not None]
        if bad:
            raise ConfigError(key, f"choices must be plain values, got {bad[0]!r}")
        return d.CategoricalDistribution(choices)
    raise ConfigError(key, f"cannot search over {type(value).__name__}; use interval(...), choice(...) or a,b,c")


def parse_space(arguments: list[str], params: dict | None = None) -> tuple[dict, list[str]]:
    """(search space {override key: distribution}, fixed overrides) from the command line and
    ``hydra.sweeper.params`` (the command line wins on the same key)."""
    parser = OverridesParser.create()
    texts = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    space, fixed = {}, {}
    for text in texts:
        try:
            override = parser.parse_override(text)
        except Exception as e:  # Hydra's grammar errors
            raise ConfigError(text.split("=", 1)[0], f"cannot parse {text!r}: {e}") from None
        key = override.get_key_element()
        if key == "sweep":
            raise ConfigError("sweep", "the optuna sweeper searches a space, not a study file: give "
                                       "interval(...), choice(...) or a,b,c overrides (and study=NAME to name it)")
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = _distribution(key, override.value())
        else:
            fixed[key] = text
    return space, list(fixed.values())


def trial_overrides(params: dict, fixed: list[str]) -> list[str]:
    """A trial's overrides: the fixed ones, then one ``key=value`` per sampled parameter."""
    return [*fixed, *(f"{k}={format_value(v)}" for k, v in params.items())]


def corners(space: dict) -> list[dict]:
    """Parameter sets to validate before anything runs: every bound and every choice, once."""
    import optuna.distributions as d

    middle = {}
    for key, dist in space.items():
        if isinstance(dist, d.CategoricalDistribution):
            middle[key] = dist.choices[0]
        else:
            middle[key] = dist.low
    out = [middle]
    for key, dist in space.items():
        values = dist.choices[1:] if isinstance(dist, d.CategoricalDistribution) else [dist.high]
        out += [{**middle, key: v} for v in values]
    return out
