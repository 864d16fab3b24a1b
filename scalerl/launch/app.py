"""The Hydra application behind ``python -m scalerl.sweep``.

``main`` turns scalerl's own flags into Hydra overrides and starts Hydra with
scalerl's config tree; ``register`` is what every process that composes or
resolves a scalerl config needs first (the entry point, and each launched
job), so that importing scalerl's Hydra plugins registers nothing.
"""
from __future__ import annotations

import os
import sys

import hydra
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from scalerl.config import ConfigError, as_config_error
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


CONFIG_ERRORS = (ConfigError, HydraException, OmegaConfBaseException)
"""What bad input raises before anything runs: composing (an unknown option, a value of the wrong type,
bad override syntax), validating, or planning a sweep."""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    sys.argv = [sys.argv[0], *hydra_argv(argv)]
    register()
    # Hydra prints its own report of an error (a stripped traceback, or a config search path)
    # unless HYDRA_FULL_ERROR is set, in which case it re-raises. We set it to receive the
    # error, so bad input prints one line naming the key and exits 2, whatever Hydra would do.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")(run_arm)()
    except CONFIG_ERRORS as e:
        print(f"[scalerl] config error: {as_config_error(e)}", file=sys.stderr)
        sys.exit(2)
