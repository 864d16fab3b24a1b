"""scalerl's Hydra plugins (Hydra discovers plugins only under ``hydra_plugins``).

Thin classes; the logic lives in ``scalerl.launch``. Importing this package
registers scalerl's schemas and the ``${scalerl_run_name:}`` resolver, which
every process that composes a scalerl config (sweeper, launcher children,
SLURM jobs) needs.
"""
from scalerl.config.store import register_configs

register_configs()
