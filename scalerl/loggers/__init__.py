"""Experiment loggers (config group ``logger``): ``wandb`` or ``none``.

``fn(cfg) -> Logger`` (the ``Logger`` contract in ``base.py``): ``start(run_dir,
name, group, config, run_id)``, ``log(row, step)`` and ``finish()``. ``metrics.jsonl`` is always written by
the loop itself; a logger only mirrors it. Must not know about training.
"""
from scalerl.core.option import Option
from scalerl.loggers import null, wandb_logger

LOGGERS: dict[str, Option] = {
    "wandb": Option(wandb_logger.WandbConfig, wandb_logger.WandbLogger),
    "none": Option(null.NoLoggerConfig, null.NullLogger),
}
