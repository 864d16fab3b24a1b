"""Rollout routing replay (R3, arXiv 2510.11370): the trainer's forwards send each token through
the experts the generator chose for it at each layer. The weights of those experts are the
trainer's own router scores at them (softmax probabilities, renormalised as the model's
``norm_topk_prob`` says; Llama-4's sigmoids, never renormalised), so the routing part of the
mismatch is gone while the gate still gets its gradient."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.lazy import torch
from scalerl.routing.base import RoutingConfig, topk_weights


@dataclass
class ReplayConfig(RoutingConfig):
    def replays(self) -> bool:
        return True


def replayed_routing(probs, own, recorded, *, norm_topk_prob: bool, cfg: ReplayConfig):
    """The recorded experts where a token has them (``recorded`` >= 0), the router's own elsewhere.

    >>> import torch
    >>> probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    >>> w, e = replayed_routing(probs, torch.tensor([[3, 2], [0, 1]]), torch.tensor([[0, 1], [-1, -1]]),
    ...                         norm_topk_prob=True, cfg=ReplayConfig())
    >>> e.tolist(), [[round(x, 4) for x in r] for r in w.tolist()]
    ([[0, 1], [0, 1]], [[0.3333, 0.6667], [0.5714, 0.4286]])

    Llama-4's top-1 sigmoid router: the recorded expert's own sigmoid, not renormalised to 1.

    >>> scores = torch.sigmoid(torch.tensor([[2.0, -1.0, 0.5, 0.0]]))
    >>> w, e = replayed_routing(scores, torch.tensor([[0]]), torch.tensor([[2]]), norm_topk_prob=False,
    ...                         cfg=ReplayConfig())
    >>> e.tolist(), round(w.item(), 4)
    ([[2]], 0.6225)
    """
    experts = torch.where(recorded >= 0, recorded.to(own.dtype), own)
    return topk_weights(probs, experts, norm_topk_prob), experts
