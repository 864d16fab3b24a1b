"""``hydra/sweeper=scalerl`` (the default): see ``scalerl.launch.sweeping``."""
from __future__ import annotations

from typing import Any, List, Optional

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

ACTIONS = ("run", "status", "dry-run")


def check_sweeper_settings(action, poll_s, max_arms=1) -> None:
    """The settings every scalerl sweeper reads at once: a ConfigError naming the key (Hydra wraps it in
    an InstantiationException; the entry point unwraps it). ``poll_s`` <= 0 or NaN busy-loops the
    sweep's parent process (the early-stop watcher waits that long between checks)."""
    from scalerl.core.errors import ConfigError  # here: Hydra imports this module in every Hydra app

    if action not in ACTIONS:
        raise ConfigError("hydra.sweeper.action", f"must be one of {list(ACTIONS)}, got {action!r}",
                          "use --dry-run or --status, or leave it at run")
    if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not 0 < poll_s < float("inf"):
        raise ConfigError("hydra.sweeper.poll_s", f"must be a number of seconds > 0, got {poll_s!r}",
                          "set hydra.sweeper.poll_s=5 (the default)")
    if isinstance(max_arms, bool) or not isinstance(max_arms, int) or max_arms < 1:
        raise ConfigError("hydra.sweeper.max_arms", f"must be a whole number of arms >= 1, got {max_arms!r}",
                          "set hydra.sweeper.max_arms=1000 (the default)")


class ScalerlSweeper(Sweeper):
    def __init__(self, action: str = "run", leaderboard: bool = True, n_boot: Optional[int] = None,
                 reuse: bool = True, early_stop: bool = False, stop_rule: Optional[dict] = None, poll_s: float = 5.0,
                 max_arms: int = 1000, cost: Optional[dict] = None):
        check_sweeper_settings(action, poll_s, max_arms)
        self.action = action
        self.leaderboard = leaderboard
        self.n_boot = n_boot        # None: the analysis default, the same as `python -m analysis fit`
        self.reuse = reuse          # link finished runs of the same config hash from other studies
        self.early_stop = early_stop  # see scalerl.launch.early_stop
        self.stop_rule = dict(stop_rule or {})
        self.poll_s = poll_s
        self.max_arms = max_arms    # a sweep past it is refused before any arm is built (launch/expansion.py)
        self.cost = dict(cost or {})  # the cost estimate's throughput (scalerl/launch/cost_plan.py)
        self.config: Optional[DictConfig] = None
        self.launcher = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        # Imported here, not at the top: Hydra imports this module in every Hydra app on the
        # machine, which must not pay for (or be changed by) importing scalerl.
        from scalerl.launch.sweeping import run_sweep

        return run_sweep(self, arguments)
