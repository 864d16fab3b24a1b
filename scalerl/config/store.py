"""Register every schema in Hydra's ConfigStore (derived from the registries)."""
from __future__ import annotations

from hydra.core.config_store import ConfigStore

from scalerl.config.registry import axis_registries
from scalerl.config.schema import BatchConfig, Config
from scalerl.launch.rundir import register_resolver

_done = False


def register_configs() -> None:
    global _done
    register_resolver()
    if _done:
        return
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="schema/batch", name="batch", node=BatchConfig)
    for axis, options in axis_registries().items():
        for name, option in options.items():
            cs.store(group=f"schema/{axis}", name=name, node=option.schema)
    _done = True
