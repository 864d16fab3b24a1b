"""``hydra/launcher=local`` (the default): parallel arms on this machine.
See ``scalerl.launch.local_pool``."""
from __future__ import annotations

from typing import Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class LocalParallelLauncher(Launcher):
    def __init__(self, n_parallel: int = 0, threads_per_arm: int = 1, gpus_per_arm="auto", share_gpus: bool = False):
        self.n_parallel = n_parallel
        self.threads_per_arm = threads_per_arm
        self.gpus_per_arm = gpus_per_arm  # scalerl/launch/gpus.py: each arm's share of this machine's GPUs
        self.share_gpus = share_gpus
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        # Imported here: Hydra imports this module in every Hydra app on the machine.
        from scalerl.launch.local_pool import run_parallel

        return run_parallel(self, job_overrides, initial_job_idx)
