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


_stored: tuple | None = None
"""The registries' options as last stored, and the store they went into."""


def register_schemas() -> None:
    """Store ``base_config`` and ``schema/<group>/<option>`` (idempotent).

    Each option's ``name`` is its registry key, set here and read-only, so an
    option's name always fixes its behaviour. Stored again only when an option
    was added or replaced since (a registry is a plain dict a plugin may extend)
    or the store is another: every ``compose`` calls this, and storing ~80
    structured schemas is a quarter of a composition's time.
    """
    global _stored
    cs = ConfigStore.instance()
    state = (id(cs), tuple((group, name, id(option.schema)) for group, options in OPTION_GROUPS.items()
                           for name, option in options.items()))
    if state == _stored and "base_config.yaml" in cs.repo:
        return
    cs.store(name="base_config", node=Config)
    cs.store(group="schema/batch", name="batch", node=BatchConfig)
    for group, options in OPTION_GROUPS.items():
        for name, option in options.items():
            node = OmegaConf.structured(option.schema)
            node.name = name
            node._get_node("name")._set_flag("readonly", True)
            cs.store(group=f"schema/{group}", name=name, node=node)
    _stored = state
