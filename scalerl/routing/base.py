"""The routing contract, the shared schema and the top-k weights both options use."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import MISSING

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class RoutingConfig:
    name: str = MISSING
    """The option's registry key, written by the config store (choose it with ``routing=<name>``)."""

    def replays(self) -> bool:
        """The trainer's forwards take the generator's recorded experts (only an MoE model has any)."""
        return False


class RouteFn(Protocol):
    """The router's per-expert scores (n, E) fp32 (a softmax router's probabilities, Llama-4's
    sigmoids), the router's own top-k (n, k) and the recorded top-k (n, k) (-1: none recorded, e.g. a
    pad position) -> (the top-k weights (n, k), the experts used (n, k))."""

    def __call__(self, probs: Tensor, own: Tensor, recorded: Tensor, *, norm_topk_prob: bool) -> tuple[Tensor, Tensor]: ...


def topk_weights(probs: Tensor, experts: Tensor, norm_topk_prob: bool) -> Tensor:
    """The router's weights of ``experts``: their scores (softmax probabilities, or Llama-4's independent
    sigmoids), renormalised to sum to 1 where the model says so (Qwen3-MoE's ``norm_topk_prob``), as the
    router computes them for its own top-k. probs (n, E), experts (n, k) long -> (n, k), differentiable in probs.

    >>> import torch
    >>> topk_weights(torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[2, 0]]), True)
    tensor([[0.2857, 0.7143]])
    """
    w = probs.gather(-1, experts)
    return w / w.sum(dim=-1, keepdim=True) if norm_topk_prob else w
