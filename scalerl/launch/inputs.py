"""What a validated config's inputs must be on this machine, checked before any process starts:
the code sandbox's isolation (bubblewrap, or the explicit consent to grade without it), the
task files (UTF-8 JSON with the configured fields) and ``model=hf``'s ``config.json`` as
transformers reads it.

``validate`` checks values and that the files exist; these checks read the files and probe
the machine, so they run where the launch does. ``check_machine`` is every check that needs
the machine, in one call: the inputs, the environment (CUDA, vLLM) and the resources (memory,
threads, SLURM's task); a sweep's ``--dry-run`` and its launch (``sweeping.plan_arms``), and every
arm before its trainer starts (``task.run_arm``), call it after ``validate``. Each
raises a ``ConfigError`` naming the key. Results are cached per file state and settings, so a
sweep of many arms on one task file reads it once.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from scalerl.config import Config, check_environment
from scalerl.config.resources import check_resources
from scalerl.core.errors import ConfigError
from scalerl.models.hf import HFModelConfig, check_hf_config
from scalerl.tasks import code, math
from scalerl.tasks.mix import MixConfig
from scalerl.tasks.sandbox import refusal


def check_machine(c: Config, launcher=None, *, this_machine: bool = True, world_size: int = 1) -> tuple[str, list[str]]:
    """Every check of a validated config that needs the machine; ``this_machine``: the arms train
    here (a SLURM sweep's arms check their own node's environment when they start). Returns
    ``check_resources``'s summary and warnings."""
    check_inputs(c, this_machine=this_machine)
    if this_machine:
        check_environment(c)
    return check_resources(c, launcher, world_size=world_size)


def check_inputs(c: Config, *, this_machine: bool = True) -> None:
    """Raise ``ConfigError`` naming the key of the first input that would fail the run late.
    ``this_machine``: the arms train here, so the sandbox is probed here (a SLURM sweep's arms
    probe their own node when they start)."""
    for key, task in _tasks(c):
        if isinstance(task, code.CodeConfig) and this_machine:
            why = refusal(task.sandbox)
            if why:
                raise ConfigError(f"{key}.sandbox.isolation", why.removeprefix("sandbox: "),
                                  f"install bubblewrap, or set {key}.sandbox.unsafe_process_isolation=true")
        if isinstance(task, (code.CodeConfig, math.MathConfig)):
            _check_task_file(key, task, _state(task.path))
    if isinstance(c.model, HFModelConfig):
        _check_model(c.model.path, _state(str(Path(c.model.path).expanduser() / "config.json")))


def _tasks(c: Config):
    """(key prefix, task config) of the run's task, or of each entry of a mix."""
    if isinstance(c.task, MixConfig):
        return [(f"task.tasks.{name}", sub) for name, sub in c.task.tasks.items()]
    return [("task", c.task)]


def _state(path: str) -> tuple:
    """What a cached check of ``path`` depends on: the file's identity and last change."""
    try:
        st = os.stat(Path(path).expanduser())
    except OSError:
        return (path,)
    return (path, st.st_size, st.st_mtime_ns, st.st_ino)


_CHECKED: set[tuple] = set()
"""The checks that passed, by what they depend on (settings and file state)."""


def _check_model(path: str, state: tuple) -> None:
    if ("model", state) not in _CHECKED:
        check_hf_config(path)
        _CHECKED.add(("model", state))


def _check_task_file(key: str, task, state: tuple) -> None:
    """The file reads as the task reads it (UTF-8 JSON records with the configured fields, at least
    two usable problems); its prompts are rendered plainly, as the model's tokenizer is not loaded here."""
    ident = (key, repr(task), state)
    if ident in _CHECKED:
        return
    plain = dataclasses.replace(task, prompt=dataclasses.replace(task.prompt, template="plain"))
    load = code.load_problems if isinstance(task, code.CodeConfig) else math.load_problems
    try:
        load(plain)
    except ConfigError as e:
        if key == "task":
            raise
        raise ConfigError(e.key.replace("task.", f"{key}.", 1), e.reason) from None
    _CHECKED.add(ident)
