"""Every example in a docstring of ``scalerl/`` and ``analysis/`` runs: a doctest is a hand-computed
value next to the code it checks, and one nobody runs rots silently (docs/testing.md)."""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules_with_examples() -> list[str]:
    out = []
    for package in ("scalerl", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = path.relative_to(ROOT).with_suffix("").parts
                out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


MODULES = modules_with_examples()


def test_the_packages_have_examples():
    # the walk finds them (a wrong root would pass every parametrised case below by having none)
    assert len(MODULES) >= 20 and "scalerl.train.schedules.pipeline" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name}: '>>>' in the source, but no example was collected"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (printed above)"
