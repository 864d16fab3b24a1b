"""The Hydra application behind ``python -m scalerl.sweep``.

``main`` turns scalerl's own flags into Hydra overrides and starts Hydra with
scalerl's config tree; ``register`` is what every process that composes or
resolves a scalerl config needs first (the entry point, and each launched
job), so that importing scalerl's Hydra plugins registers nothing.
"""
from __future__ import annotations

import sys

import hydra

from scalerl.config.store import register_schemas
from scalerl.core.paths import conf_dir
from scalerl.launch.rundir import register_resolver
from scalerl.launch.task import run_arm

ACTIONS = {"--status": "status", "--dry-run": "dry-run"}
"""scalerl's flags: sweeper actions that launch nothing (they imply ``-m``)."""


def register() -> None:
    """The schemas in Hydra's ConfigStore and the ``${scalerl_run_name:}`` resolver (idempotent)."""
    register_schemas()
    register_resolver()


def hydra_argv(argv: list[str]) -> list[str]:
    """``--status`` / ``--dry-run`` become ``hydra.sweeper.action=...`` on a multirun."""
    args = [a for a in argv if a not in ACTIONS]
    actions = [ACTIONS[a] for a in argv if a in ACTIONS]
    if actions:
        if not {"-m", "--multirun"} & set(args):
            args.insert(0, "-m")
        args.append(f"hydra.sweeper.action={actions[-1]}")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sys.argv = [sys.argv[0], *hydra_argv(argv)]
    register()
    hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")(run_arm)()
