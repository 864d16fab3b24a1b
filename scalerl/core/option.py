"""The registry entry type shared by every config group with code behind it.

Each option package (``scalerl/losses``, ``scalerl/filters``, ``scalerl/models``,
...) exposes one plain dict ``{option_name: Option(schema, fn)}``. The dict key
*is* the option's name: the config store writes it into the option's ``name``
field, and code looks behaviour up by that key, so a module copied from
another option cannot train the other option under a new label.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Option:
    schema: type
    """Config dataclass of the option (stored as ``schema/<group>/<name>``)."""
    fn: Callable[..., Any]
    """The pure function (or factory) implementing the option; its contract is
    the ``Protocol`` in the group's ``base.py``."""
