"""The correction contract, the shared schema and the token weight w_t."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

from scalerl.core.lazy import torch

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class CorrectionConfig:
    name: str = MISSING
    """The option's registry key, written by the config store (choose it with ``correction=<name>``)."""

    def needs_old_logp(self) -> bool:
        """The option weighs tokens by π_old / π_gen: the update runs one extra forward without
        gradient before its first optimizer step (its time is the step row's ``correction_forward_s``)."""
        return True


class CorrectionFn(Protocol):
    """(N, T) trainer log-probs at the pre-update weights, generator log-probs and mask ->
    ((N, T) per-token weight on the loss, scalar metrics)."""

    def __call__(self, old_logp: Tensor, gen_logp: Tensor, mask: Tensor) -> tuple[Tensor, dict]: ...


def token_ratio(old_logp: Tensor, gen_logp: Tensor) -> Tensor:
    """w_t = π_old(y_t) / π_gen(y_t), computed from log-probs: (N, T)."""
    return torch.exp(old_logp - gen_logp)


def masked_frac(x: Tensor, mask: Tensor) -> Tensor:
    """The fraction of ``mask``'s tokens where the bool ``x`` holds (0 for an empty mask)."""
    m = mask.float()
    return (x.float() * m).sum() / m.sum().clamp(min=1)
