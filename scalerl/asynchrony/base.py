"""The async contract, the shared schema and the pure version arithmetic.

A *version* is the number of optimizer steps (generation batches) behind a set
of weights: the trainer holds version ``v`` after its ``v``-th step, and every
generated token records the version that produced it. Step ``s`` trains at
trainer version ``s - 1``, so a token of version ``g`` consumed by step ``s``
is ``s - 1 - g`` versions stale.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

from scalerl.core.errors import check

if TYPE_CHECKING:
    from torch import Tensor

IN_PROCESS = "local.LocalSchedule"
"""The schedule where the trainer's process generates (``scalerl/train/schedules/local.py``)."""
GENERATOR_PROCESSES = "pipeline.PipelineSchedule"
"""The schedule where generator processes stream (``scalerl/train/schedules/pipeline.py``)."""

@dataclass
class AsyncConfig:
    name: str = MISSING
    """The option's registry key, written by the config store (choose it with ``async=<name>``)."""
    generators: int = 0
    """Generator processes, each with its own copy of the weights; 0: generate in the trainer's process."""
    generator_threads: int = 0
    """torch threads per generator process; 0: an equal share of the run's threads (``train.threads``)."""
    timeout_s: float = 300.0
    """Longest wait on the other side (start-up, a rollout, a weight push, a message) before the run
    fails with an error naming the stage. Must exceed the trainer's longest pause (eval + checkpoint)."""
    external_generators: int = 0
    """Of the ``generators``, how many the trainer does not start: the last ones (indices
    ``generators - external_generators`` on), which an operator starts on other nodes and which
    join with the trainer's address (docs/async.md, 'Generators on other nodes'). Start-up waits
    for them up to ``timeout_s``."""
    generator_nodes: int = 0
    """SLURM node roles: the last this many nodes of the arm's job (``hydra.launcher.nodes`` =
    trainer nodes + this) run one generator each, the last ones of ``generators``, started by the
    job itself; the other nodes run the trainer ranks (``hydra.launcher.tasks_per_node`` each).
    docs/slurm.md, 'Node roles'."""

    def __post_init__(self) -> None:
        check(self.generators >= 0, "async.generators", f"must be >= 0, got {self.generators}")
        check(self.generator_threads >= 0, "async.generator_threads", f"must be >= 0, got {self.generator_threads}")
        check(self.timeout_s > 0, "async.timeout_s", f"must be > 0, got {self.timeout_s}")
        check(0 <= self.external_generators <= self.generators, "async.external_generators",
              f"must be between 0 and async.generators ({self.generators}), got {self.external_generators}")
        check(self.generator_nodes >= 0, "async.generator_nodes", f"must be >= 0, got {self.generator_nodes}")
        check(self.external_generators + self.generator_nodes <= self.generators, "async.generator_nodes",
              f"one generator per generator node: async.generators ({self.generators}) must be at least "
              f"async.external_generators + async.generator_nodes "
              f"({self.external_generators} + {self.generator_nodes})")

    @abstractmethod
    def schedule(self) -> str:
        """The schedule that carries this option out, as ``"<module>.<Class>"`` of
        ``scalerl/train/schedules/`` (``IN_PROCESS``, ``GENERATOR_PROCESSES``, or a module of the
        option's own). A name, not the class: this axis sits below ``train/``, which resolves it
        once at set-up (``schedules.schedule_class``). Where the batches come from fixes the
        road the weights take (``run_plan.road_kind``): generator processes when
        ``generators >= 1``, else the trainer's process.

        Every option defines it. ``@abstractmethod`` here is a marker, as on ``LossConfig.clamp``:
        validation refuses an option whose schema still inherits it, naming ``async``."""
        raise NotImplementedError


@dataclass(frozen=True)
class Interleaving:
    """How one run interleaves generation and training (built once from the ``async`` option)."""

    max_lag: int
    """A consumed token is at most this many versions older than the trainer (the lag bound)."""
    push_every: int
    """The trainer pushes its weights to the generators after every ``push_every``-th step."""
    in_flight: bool
    """A push may land between two decode steps of a batch (else only between batches)."""
    generators: int
    """Generator processes (0: the trainer's process generates)."""
    generator_threads: int = 0
    timeout_s: float = 300.0
    lookahead: int = -1
    """Steps beyond the one being trained whose batches the generators may work on (-1: as many
    as the lag bound allows, ``max_lag``). PipelineRL's staleness should come from completions
    that span in-flight updates, not from generators that run ahead and fill the lag bound
    (docs/async.md, 'Lookahead'); ``lookahead <= max_lag`` keeps the generators at most that
    far ahead, while ``max_lag`` stays the bound on a token's age."""

    def min_version(self, step: int) -> int:
        """The oldest version allowed to generate tokens for ``step``'s batch (the lag bound)."""
        return max(0, step - 1 - self.max_lag)


class InterleavingFn(Protocol):
    """An ``async`` option with its config bound -> the run's ``Interleaving``."""

    def __call__(self) -> Interleaving: ...


def staleness(version: Tensor, present: Tensor, trainer_version: int) -> Tensor:
    """Per-token staleness ``trainer_version - version`` over present tokens.

    version (N, T) long, present (N, T) bool -> (n_present,) long.

    >>> import torch
    >>> staleness(torch.tensor([[3, 4, 0], [4, 4, 4]]), torch.tensor([[1, 1, 0], [1, 1, 1]]).bool(), 4).tolist()
    [1, 0, 0, 0, 0]
    """
    return trainer_version - version[present]


def version_stats(version: Tensor, present: Tensor, trainer_version: int) -> dict:
    """The staleness distribution of the consumed tokens (mean, median, 90th percentile, max, and
    the fraction at least one version old), and the fraction of completions whose tokens come from
    more than one policy version (in-flight updates, arXiv 2510.13786 §3.1).

    >>> import torch
    >>> s = version_stats(torch.tensor([[3, 4, 4, 4], [2, 2, 4, 4]]), torch.ones(2, 4, dtype=torch.bool), 4)
    >>> s["staleness_p50"], s["staleness_p90"], s["staleness_max"], s["stale_frac"]
    (0.0, 2.0, 2, 0.375)
    """
    stale = staleness(version, present, trainer_version).float()
    big = version.masked_fill(~present, -1).amax(-1)  # (N,)
    small = version.masked_fill(~present, 1 << 62).amin(-1)
    has = present.any(-1)
    multi = ((big != small) & has).float().sum() / has.float().sum().clamp(min=1)
    stale = stale if stale.numel() else stale.new_zeros(1)  # an empty batch: nothing stale
    q = stale.quantile(stale.new_tensor([0.5, 0.9]), interpolation="lower")
    return {"staleness_mean": stale.mean().item(), "staleness_p50": q[0].item(), "staleness_p90": q[1].item(),
            "staleness_max": int(stale.max().item()), "stale_frac": (stale >= 1).float().mean().item(),
            "multi_version_frac": multi.item()}


def within_lag(version: Tensor, present: Tensor, trainer_version: int, group: int, *, max_lag: int) -> Tensor:
    """(P,) bool: prompt groups none of whose tokens is older than ``max_lag`` versions.

    The schedules never hand the trainer such a token (generators pause first), so this is
    the trainer's own guard: a group that fails it is dropped, and its tokens still count
    as generation compute. version/present (P*G, T), grouped by prompt.

    >>> import torch
    >>> v = torch.tensor([[5, 5], [5, 5], [2, 5], [5, 5]]); p = torch.ones(4, 2, dtype=torch.bool)
    >>> within_lag(v, p, 6, 2, max_lag=3).tolist()
    [True, False]
    """
    old = ((trainer_version - version) > max_lag) & present  # (P*G, T)
    return ~old.any(-1).view(-1, group).any(-1)
