"""What the command line itself gets wrong, refused before Hydra starts (Hydra makes the run's
directory before any scalerl code runs, so these cannot wait for ``validate``): a study without
``-m``, an output or cache directory that cannot be made, and a thread count in the environment
that is not one."""
from __future__ import annotations

import os

from scalerl.core.errors import ConfigError, check
from scalerl.core.writable import unwritable

DIRECTORY_KEYS = {"out_root": "SCALERL_OUTPUT", "hydra.run.dir": None, "hydra.sweep.dir": None,
                  "cache_dir": "SCALERL_CACHE"}
"""Directory settings, with the environment variable that is their default (``conf/config.yaml``)."""


def _literal(value: str) -> str | None:
    """The directory an override names, or None when only composing can tell (interpolations, lists)."""
    value = value.strip().strip("'\"")
    return None if not value or any(c in value for c in "${}[],") else value


def check_command_line(args: list[str], env=os.environ) -> None:
    """Raise ConfigError naming the key or variable; ``args`` are Hydra's (``-m`` already implied)."""
    multirun = bool({"-m", "--multirun"} & set(args))
    given = {a.lstrip("+~").split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a and not a.startswith("-")}
    # A study is a set of arms; without -m Hydra would compose one default run and train it (arXiv
    # 2510.13786's ablations are sweeps: sweeps/*.yaml).
    study = given.get("sweep", "").strip("'\"")
    check(multirun or study in ("", "null"), "sweep",
          f"a study runs several arms and needs -m: python -m scalerl.sweep -m sweep={study} (or --dry-run to see them)")
    for key, variable in DIRECTORY_KEYS.items():
        if key in given:
            path, source = _literal(given[key]), ""
        elif variable and env.get(variable):
            path, source = _literal(env[variable]), f" (from {variable}={env[variable]}, the default of {key})"
        else:
            continue
        why = unwritable(path) if path else None
        if why:
            raise ConfigError(key, f"{why}{source}; nothing was created", f"give {key}=<a writable directory>"
                              + (f" or unset {variable}" if variable and key not in given else ""))
    threads = env.get("SCALERL_NUM_THREADS", "")
    if threads:
        check(threads.isdigit() and int(threads) > 0, "SCALERL_NUM_THREADS",
              f"must be a whole number of threads > 0 (or unset), got {threads!r}")
