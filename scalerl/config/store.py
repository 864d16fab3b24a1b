"""Register every schema in Hydra's ConfigStore, derived from the option groups.

Called by the entry point and by every process that composes a config (the
launcher's children); never at import time, so importing scalerl's Hydra
plugins changes nothing in another Hydra app.
"""
from __future__ import annotations

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from scalerl.config.groups import OPTION_GROUPS
from scalerl.config.schema import BatchConfig, Config


def register_schemas() -> None:
    """Store ``base_config`` and ``schema/<group>/<option>`` (idempotent).

    Each option's ``name`` is its registry key, set here and read-only, so an
    option's name always fixes its behaviour.
    """
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="schema/batch", name="batch", node=BatchConfig)
    for group, options in OPTION_GROUPS.items():
        for name, option in options.items():
            node = OmegaConf.structured(option.schema)
            node.name = name
            node._get_node("name")._set_flag("readonly", True)
            cs.store(group=f"schema/{group}", name=name, node=node)
