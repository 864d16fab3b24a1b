"""How many arms a sweep makes, counted before any is built, and the progress of building them.

Hydra's basic sweeper enumerates every comma list and ``range(...)`` into strings, and scalerl then
composes and validates each arm (about 0.2 s an arm on a laptop core). So the size of a sweep is
counted from the overrides and the study files first: an override that expands to no values is
refused (Hydra's product of an empty list would be no arms, which the launcher read as one arm of
the defaults), and so is a sweep past ``hydra.sweeper.max_arms``, before one arm is built.
"""
from __future__ import annotations

import decimal
import math
import os
import sys
import time

from hydra.core.override_parser.types import Override, RangeSweep

from scalerl.core.errors import ConfigError

MAX_ARMS = 1000
"""The default of ``hydra.sweeper.max_arms``: the largest study in sweeps/ has 24 arms, and 1000 arms
take minutes just to validate."""


def sweep_size(override: Override) -> int:
    """How many values ``override`` expands to, a range counted without enumerating it."""
    if not override.is_sweep_override() or not override.is_discrete_sweep():
        return 1                                     # one value, or an interval Hydra's sweeper refuses itself
    value = override.value()
    if isinstance(value, RangeSweep):
        return _range_size(override.get_key_element(), value)
    return sum(1 for _ in override.sweep_iterator())  # a choice list or a glob over a group's options


def _range_size(key: str, r: RangeSweep) -> int:
    if r.step == 0:
        raise ConfigError(key, f"range({r.start}, {r.stop}, 0) has a step of 0", f"give {key}=range(start, stop, step) "
                          "with a step that is not 0")
    if all(isinstance(x, int) for x in (r.start, r.stop, r.step)):
        return len(range(r.start, r.stop, r.step))
    start, stop, step = (decimal.Decimal(x) for x in (r.start, r.stop, r.step))  # as Hydra's FloatRange counts
    return max(0, math.ceil((stop - start) / step))


def check_size(counts: dict[str, int], studies: list[tuple[str, int]], max_arms: int) -> int:
    """The sweep's number of arms (the product of ``counts``, per override key, and ``studies``, per
    study file); ConfigError naming the key of an empty expansion or past ``max_arms``."""
    for key, n in counts.items():
        if n == 0:
            raise ConfigError(key, "expands to no values, so the sweep would have no arms",
                              f"give {key} at least one value, e.g. a range whose stop is past its start")
    total = math.prod(counts.values()) * math.prod(n for _, n in studies)
    if total > max_arms:
        factors = {**{f"`{k}`": n for k, n in counts.items()}, **{f"study {s}": n for s, n in studies}}
        biggest = max(factors, key=factors.get)
        raise ConfigError("hydra.sweeper.max_arms", f"this sweep would make {total:,} arms ({biggest} gives "
                          f"{factors[biggest]:,}), more than the cap of {max_arms:,}; nothing was built",
                          f"narrow the sweep, or raise the cap: hydra.sweeper.max_arms={total}")
    return total


PROGRESS_AFTER_ENV = "SCALERL_PROGRESS_AFTER_S"
"""Seconds of validation before the first progress line (default 3): the tests set 0, so that
whether a line is printed does not depend on how fast the machine validates."""


class Progress:
    """Prints ``[scalerl] validated i/n arms`` every ``every_s`` once building the arms has taken
    ``after_s``, so a large ``--dry-run`` is not silent; nothing for one that finishes sooner."""

    def __init__(self, total: int, after_s: float | None = None, every_s: float = 5.0, clock=time.monotonic,
                 out=None):
        if after_s is None:
            after_s = float(os.environ.get(PROGRESS_AFTER_ENV, "3"))
        self.total, self.every_s, self.clock, self.out = total, every_s, clock, out
        self.next = clock() + after_s

    def tick(self, done: int) -> None:
        now = self.clock()
        if now >= self.next and done < self.total:
            print(f"[scalerl] validated {done}/{self.total} arms", file=self.out or sys.stdout, flush=True)
            self.next = now + self.every_s
