"""``hydra/sweeper=optuna``: Optuna search over scalerl arms; see ``scalerl.launch.optuna_sweep``."""
from __future__ import annotations

from typing import Any, List, Optional

from hydra.types import HydraContext
from omegaconf import DictConfig

from hydra_plugins.scalerl_plugins.sweeper import ScalerlSweeper, check_sweeper_settings


class ScalerlOptunaSweeper(ScalerlSweeper):  # setup() (the launcher) is the grid sweeper's
    def __init__(self, action: str = "run", n_trials: int = 20, n_jobs: int = 2, objective: str = "A",
                 target_compute: Optional[float] = None, sampler: str = "tpe", seed: int = 0,
                 sampler_kwargs: Optional[dict] = None, pruner: str = "sigmoid", pruner_kwargs: Optional[dict] = None,
                 stop_rule: Optional[dict] = None, storage: Optional[str] = None, study_name: Optional[str] = None,
                 params: Optional[dict] = None, poll_s: float = 5.0, leaderboard: bool = True, n_boot: int = 100):
        check_sweeper_settings(action, poll_s)
        self.action, self.n_trials, self.n_jobs = action, n_trials, n_jobs
        self.objective, self.target_compute = objective, target_compute
        self.sampler, self.seed, self.sampler_kwargs = sampler, seed, dict(sampler_kwargs or {})
        self.pruner, self.pruner_kwargs, self.stop_rule = pruner, dict(pruner_kwargs or {}), dict(stop_rule or {})
        self.storage, self.study_name, self.params = storage, study_name, dict(params or {})
        self.poll_s, self.leaderboard, self.n_boot = poll_s, leaderboard, n_boot
        self.config: Optional[DictConfig] = None
        self.launcher = None
        self.hydra_context: Optional[HydraContext] = None

    def sweep(self, arguments: List[str]) -> Any:
        # Imported here: Hydra imports this module in every Hydra app on the machine.
        from scalerl.launch.optuna_sweep import run_optuna_sweep

        return run_optuna_sweep(self, arguments)
