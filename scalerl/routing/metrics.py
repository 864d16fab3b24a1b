"""Routing diagnostics of a mixture of experts (docs/outputs.md, ``routing_*``). Pure: experts and
masks in, scalars out; the update decides which tokens enter (``train/routed.py``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from scalerl.core.lazy import torch

if TYPE_CHECKING:
    from torch import Tensor


def set_differs(used: Tensor, recorded: Tensor) -> Tensor:
    """(..., L, k) experts on both sides -> (..., L) bool: the top-k *sets* differ (order aside).

    >>> set_differs(torch.tensor([[[0, 3], [1, 2]]]), torch.tensor([[[3, 0], [1, 4]]])).tolist()
    [[False, True]]
    """
    return (used.sort(dim=-1).values != recorded.sort(dim=-1).values).any(dim=-1)


def disagreement(differ: Tensor, suffix: str = "") -> dict:
    """differ (m, L) bool over m tokens' layers -> ``routing_disagree{suffix}``, the fraction of
    token-layer pairs whose top-k sets differ, and ``routing_pairs{suffix}``, their number (no pairs: only 0).

    >>> disagreement(torch.tensor([[True, False], [False, False]]), "_stale")
    {'routing_disagree_stale': 0.25, 'routing_pairs_stale': 4}
    """
    n = int(differ.numel())
    if n == 0:
        return {f"routing_pairs{suffix}": 0}
    return {f"routing_disagree{suffix}": differ.double().mean().item(), f"routing_pairs{suffix}": n}


def kl_by_agreement(train_logp: Tensor, gen_logp: Tensor, differ: Tensor) -> dict:
    """The k3 mismatch KL(π_gen ‖ π_train) (``correction/mismatch.py``'s ``mismatch_kl``) over the tokens
    whose predicting position was routed alike at every layer (``mismatch_kl_route_agree``) and over
    the others (``mismatch_kl_route_differ``, with ``mismatch_tokens_route_differ``). (n,) each.

    >>> lp = torch.log(torch.tensor([0.5, 0.25]))
    >>> s = kl_by_agreement(lp, torch.log(torch.tensor([0.5, 0.5])), torch.tensor([False, True]))
    >>> s["mismatch_kl_route_agree"], round(s["mismatch_kl_route_differ"], 4), s["mismatch_tokens_route_differ"]
    (0.0, 0.1931, 1)
    """
    k3 = (train_logp - gen_logp).double()
    k3 = k3.exp() - 1 - k3
    out = {"mismatch_tokens_route_differ": int(differ.sum())}
    for name, sel in (("agree", ~differ), ("differ", differ)):
        if bool(sel.any()):
            out[f"mismatch_kl_route_{name}"] = k3[sel].mean().item()
    return out


def expert_load(experts: Tensor, num_experts: int) -> list[float]:
    """experts (m, L, k) of m tokens -> per layer, the busiest expert's share of the picks over the
    mean share (1: perfectly balanced; E / k: every token on the same k experts).

    >>> expert_load(torch.tensor([[[0, 1]], [[0, 2]]]), 4)
    [2.0]
    """
    m, layers, k = experts.shape
    if m == 0:
        return []
    counts = torch.zeros((layers, num_experts), dtype=torch.float64)
    counts.scatter_add_(1, experts.permute(1, 0, 2).reshape(layers, -1).long().cpu(),
                        torch.ones((layers, m * k), dtype=torch.float64))
    return (counts.max(dim=1).values / counts.mean(dim=1)).tolist()
