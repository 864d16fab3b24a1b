"""Where the repository's conf/ and sweeps/ live.

scalerl is meant to be installed from a clone (``pip install -e .``): the
config tree and the study files are part of the repo, next to the package.
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def conf_dir() -> Path:
    d = REPO / "conf"
    if not (d / "config.yaml").exists():
        raise FileNotFoundError(f"scalerl's conf/ not found at {d}; install from a clone with `pip install -e .`")
    return d


def sweeps_dir() -> Path:
    return REPO / "sweeps"
