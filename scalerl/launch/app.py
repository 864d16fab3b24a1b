"""The Hydra application behind ``python -m scalerl.sweep``.

``main`` turns scalerl's own flags into Hydra overrides and starts Hydra with
scalerl's config tree; ``register`` is what every process that composes or
resolves a scalerl config needs first (the entry point, and each launched
job), so that importing scalerl's Hydra plugins registers nothing. Shell
completion queries for ``sweep=`` and ``hydra/launcher=`` are answered here
(the study files, scalerl's launchers); the rest go to Hydra, minus the
internal ``schema/*`` groups.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys

import hydra
from hydra._internal.hydra import Hydra
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from scalerl.config import as_config_error
from scalerl.config.store import register_schemas
from scalerl.core.errors import CheckpointsRefused, ConfigError
from scalerl.core.jsonio import RecordError
from scalerl.core.paths import conf_dir, sweeps_dir
from scalerl.launch import faults
from scalerl.launch.jobs import launchers
from scalerl.launch.precheck import check_command_line
from scalerl.launch.rundir import register_resolver
from scalerl.launch.task import run_arm
from scalerl.train.signals import raise_on_sigterm

ACTIONS = {"--status": "status", "--dry-run": "dry-run"}
"""scalerl's flags: sweeper actions that launch nothing (they imply ``-m``)."""
SWEEPER_FLAGS = {"--fresh": "hydra.sweeper.reuse=false"}
"""scalerl's flags that set the sweeper (``--fresh``: never reuse runs from other studies, and move a run
of another config out of a pinned run directory, ``task.run_arm``)."""
COMMAND = "scalerl-sweep"
"""The installed command: Hydra's bash completion binds to a command, and ``python -m`` is not one."""


def register() -> None:
    """The schemas in Hydra's ConfigStore and the ``${scalerl_run_name:}`` resolver (idempotent); every
    scalerl process calls it first, so the crash tests' one seam is armed here too (``faults.arm``:
    nothing unless ``SCALERL_FAILPOINT`` is set)."""
    register_schemas()
    register_resolver()
    faults.arm()


_OWN_TREE_FLAGS = ("-cd", "--config-dir", "-cp", "--config-path", "-cn", "--config-name")
"""Hydra's flags that compose another config tree, which may set ``hydra.mode`` itself."""


@contextlib.contextmanager
def mode_from_overrides(argv: list[str]):
    """Hydra composes the whole config once only to read ``hydra.mode``, then composes it again to
    run (a third of a dry run's compositions). scalerl's tree never sets ``hydra.mode``, so only an
    override can: read it there, and let Hydra compose for it where another tree or an override may set it."""
    if any(a.startswith(_OWN_TREE_FLAGS) or a.lstrip("+~").startswith(("hydra.mode", "hydra.searchpath"))
           for a in argv):  # the flags also as --config-dir=DIR
        yield
        return
    composed = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None  # what Hydra returns when nothing sets it
    try:
        yield
    finally:
        Hydra.get_mode = composed


def hydra_argv(argv: list[str]) -> list[str]:
    """``--status`` / ``--dry-run`` become ``hydra.sweeper.action=...`` on a multirun; ``--fresh``
    becomes ``hydra.sweeper.reuse=false``."""
    args = [a for a in argv if a not in ACTIONS and a not in SWEEPER_FLAGS]
    actions = [ACTIONS[a] for a in argv if a in ACTIONS]
    if actions:
        if not {"-m", "--multirun"} & set(args):
            args.insert(0, "-m")
        args.append(f"hydra.sweeper.action={actions[-1]}")
    args += [SWEEPER_FLAGS[a] for a in argv if a in SWEEPER_FLAGS]
    for a in args:
        if a.startswith("hydra/sweeper=") and a.split("=", 1)[1] not in SWEEPERS:
            raise ConfigError("hydra/sweeper", f"{a.split('=', 1)[1]!r} bypasses scalerl's sweeper (validation,"
                              " skipping finished arms, the leaderboard); choose one of "
                              + ", ".join(f"hydra/sweeper={n}" for n in SWEEPERS))
    return args


SWEEPERS = ("scalerl", "optuna")
"""scalerl's sweepers (``hydra_plugins/scalerl_plugins``): the grid one and the Optuna search."""


CONFIG_ERRORS = (ConfigError, HydraException, OmegaConfBaseException)
"""What bad input raises before anything runs: composing (an unknown option, a value of the wrong type,
bad override syntax), validating, or planning a sweep."""


def complete(line: str) -> list[str] | None:
    """scalerl's own answers to a completion query (the last word of ``line``), or None for Hydra's."""
    word = "" if not line or line.endswith(" ") else line.split()[-1]
    if word.startswith("sweep="):
        return [f"sweep={p.stem}" for p in sorted(sweeps_dir().glob("*.yaml"))]
    if word.startswith("hydra/launcher="):
        return [f"hydra/launcher={name}" for name in launchers()]
    if word.startswith("hydra/sweeper="):
        return [f"hydra/sweeper={name}" for name in SWEEPERS]
    if word.startswith("-"):
        return [f for f in ("-m", "--multirun", "--dry-run", "--status", "--fresh", "--help", "--cfg") if f.startswith(word)]
    return None


def _shell_completion(argv: list[str], start) -> bool:
    """Handle ``-sc install=bash`` / ``-sc query=bash``; True when done."""
    flag = next((i for i, a in enumerate(argv) if a in ("-sc", "--shell-completion")), None)
    if flag is None or flag + 1 >= len(argv):
        return False
    request = argv[flag + 1]
    if request.startswith("install="):
        sys.argv[0] = COMMAND           # bind completion to the installed command, never to `python`
        return False
    if request.startswith("query="):
        ours = complete(os.environ.get("COMP_LINE", ""))
        if ours is not None:
            print(" ".join(ours))
            return True
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            start()
        print(" ".join(w for w in buffer.getvalue().split() if not w.startswith("schema/")))
        return True
    return False


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        sys.argv = [sys.argv[0], *hydra_argv(argv)]
        check_command_line(sys.argv[1:])
    except ConfigError as e:
        print(f"[scalerl] config error: {e}", file=sys.stderr)
        sys.exit(2)
    register()
    if {"-m", "--multirun"} & set(sys.argv[1:]):  # the sweep's own process: SIGTERM stops it as Ctrl-C does
        raise_on_sigterm()
    # Hydra prints its own report of an error (a stripped traceback, or a config search path)
    # unless HYDRA_FULL_ERROR is set, in which case it re-raises. We set it to receive the
    # error, so bad input prints one line naming the key and exits 2, whatever Hydra would do.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    start = hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")(run_arm)
    try:
        if not _shell_completion(sys.argv[1:], start):
            with mode_from_overrides(sys.argv[1:]):
                start()
    except CONFIG_ERRORS as e:
        print(f"[scalerl] config error: {as_config_error(e)}", file=sys.stderr)
        sys.exit(2)
    except RecordError as e:  # a run record the trainer could not have written: the file and line, no traceback
        print(f"[scalerl] {e}", file=sys.stderr)
        sys.exit(2)
    except CheckpointsRefused as e:  # every checkpoint refused: the message says what to do, no traceback
        print(f"[scalerl] {e}", file=sys.stderr)
        sys.exit(1)
