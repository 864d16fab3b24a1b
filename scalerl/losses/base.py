"""The loss contract, the shared schema and helpers."""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class LossConfig:
    name: str = MISSING
    """The option's registry key, written by the config store (choose it with ``loss=<name>``)."""

    @abstractmethod
    def clamp(self) -> str:
        """The exact ratio clamp, written to run metadata and the leaderboard
        ("CISPO" means different clamps in different frameworks, arXiv 2510.13786 §3.2).

        Every loss defines it. ``@abstractmethod`` here is a marker, not enforcement (the
        schema is a plain dataclass): validation refuses an option whose schema still
        inherits a marked method, so a loss without ``clamp()`` fails ``--dry-run`` with
        one line naming ``loss`` instead of a traceback at launch."""
        raise NotImplementedError


class LossFn(Protocol):
    """A loss with its config bound: (N, T) log-probs, behaviour log-probs and
    mask, (N,) advantages -> ((N, T) per-token loss, scalar metrics)."""

    def __call__(self, logp: Tensor, behav_logp: Tensor, adv: Tensor, mask: Tensor) -> tuple[Tensor, dict]: ...


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)
