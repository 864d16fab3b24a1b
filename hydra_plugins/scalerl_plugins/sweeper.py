"""``hydra/sweeper=scalerl`` (the default): see ``scalerl.launch.sweeping``."""
from __future__ import annotations

from typing import Any, List, Optional

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class ScalerlSweeper(Sweeper):
    def __init__(self, max_batch_size: Optional[int] = None, leaderboard: bool = True, n_boot: int = 100):
        self.max_batch_size = max_batch_size
        self.leaderboard = leaderboard
        self.n_boot = n_boot
        self.config: Optional[DictConfig] = None
        self.launcher = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        from scalerl.launch.sweeping import run_sweep

        return run_sweep(self, arguments)
