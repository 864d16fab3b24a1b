"""The loss contract, the shared schema and helpers."""
from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from omegaconf import MISSING

from scalerl.core.lazy import torch

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
    mask, (N,) advantages -> ((N, T) per-token loss, scalar metrics). A loss may also
    return its (N, T) bool mask of the tokens past its clip under ``CLIPPED``: the update
    takes it out of the scalar metrics and reads ``rare_clip_frac`` from it."""

    def __call__(self, logp: Tensor, behav_logp: Tensor, adv: Tensor, mask: Tensor) -> tuple[Tensor, dict]: ...


CLIPPED = "clipped"
"""The metrics key of a loss's per-token clip mask (N, T) bool, optional (``LossFn``)."""

RARE_P = 0.05
"""A sampled token is rare when its behaviour probability π_gen is below this: the class of
low-probability, high-ratio fork tokens the losses treat differently (docs/embedded.md,
"A miniature whose ceiling the recipe decides"; MiniMax-M1's case for CISPO)."""


def rare_tokens(behav_logp: Tensor, mask: Tensor, p: float = RARE_P) -> Tensor:
    """(N, T) bool: the masked tokens whose behaviour probability exp(behav_logp) is below ``p``.

    >>> rare_tokens(torch.log(torch.tensor([[0.01, 0.5, 0.04]])), torch.tensor([[True, True, False]]))
    tensor([[ True, False, False]])
    """
    return mask.bool() & (behav_logp < math.log(p))


def rare_tail_stats(ratio: Tensor, clipped: Optional[Tensor] = None) -> dict:
    """The ratio's tail on the rare tokens: ratio (n,) π_train / π_gen of n rare tokens, clipped (n,)
    bool their loss's clip mask (None: the loss reports none).

    - ``rare_tokens``: n;
    - ``rare_ratio_p99`` / ``rare_ratio_max``: the ratio's 99th percentile (linear interpolation)
      and maximum;
    - ``rare_clip_frac``: the share of them past the loss's clip.
    No rare tokens: only ``rare_tokens`` (0), so an interval's row averages the steps that had some.

    >>> s = rare_tail_stats(torch.tensor([1.0, 1.5, 2.0]), torch.tensor([False, True, True]))
    >>> s["rare_tokens"], round(s["rare_ratio_p99"], 4), s["rare_ratio_max"], round(s["rare_clip_frac"], 4)
    (3, 1.99, 2.0, 0.6667)
    """
    n = int(ratio.numel())
    if n == 0:
        return {"rare_tokens": 0}
    r = ratio.detach().double().flatten()
    out = {"rare_tokens": n, "rare_ratio_p99": r.quantile(0.99).item(), "rare_ratio_max": r.max().item()}
    if clipped is not None:
        out["rare_clip_frac"] = clipped.detach().double().mean().item()
    return out


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)

def ppo_clip_token_loss(logp, behav_logp, adv, mask, eps_low: float, eps_high: float):
    """-min(ρ·Â, clip(ρ, 1-ε_low, 1+ε_high)·Â) per token.

    logp, behav_logp, mask: (N, T); adv: (N,). Returns ((N, T) loss, metrics).
    Tokens whose clipped branch is active get zero gradient.
    """
    a = adv[:, None]
    ratio = torch.exp(logp - behav_logp)  # (N, T), carries gradient
    unclipped = ratio * a
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * a
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).detach()
    return loss, {"clip_frac": masked_mean(was_clipped.float(), mask), CLIPPED: was_clipped}
