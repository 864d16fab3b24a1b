"""Record and replay a mixture of experts' routing, by forward hooks on its top-k routers.

transformers' MoE routers (Qwen3-MoE's ``Qwen3MoeTopKRouter`` and its kin) return
``(router_logits (n, E), top-k weights (n, k), top-k experts (n, k))`` for the n = batch x time
positions of one forward; the experts block then runs exactly the experts it is given. A hook on
each router therefore controls the routing without touching transformers' code:

- it always records the experts the block is about to use (``seen``, one (n, k) tensor per layer);
- inside ``replaying(experts, route)`` it replaces them: ``route`` (a ``routing`` option,
  ``scalerl/routing``) gets the softmax of the router's own logits, so the weights of the
  replayed experts carry the gate's gradient.

The generator records the experts it sampled with (``generation/engines/torch_engine.py``); the
trainer replays them (``policy.CompletionLogits``) or only records its own for the routing metrics
(``routing_*``, docs/outputs.md). A checkpointed layer's recompute would run its router again
outside the replay: ``routing=replay`` refuses ``model.activation_checkpointing``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import torch

ATTR = "_scalerl_router_hooks"


def is_topk_router(module: torch.nn.Module) -> bool:
    """transformers' top-k routers: a ``weight`` (E, H), ``top_k`` and ``num_experts`` (Qwen3-MoE, Mixtral, ...)."""
    return type(module).__name__.endswith("TopKRouter") and hasattr(module, "top_k") and hasattr(module, "num_experts")


RENORMALISED = {"MixtralTopKRouter": True}
"""Routers without a ``norm_topk_prob`` attribute, and whether their forward renormalises its top-k
probabilities: Mixtral's always does (a softmax over the top-k logits, arXiv 2401.04088 §2.1)."""


def renormalises(router: torch.nn.Module) -> bool:
    """Whether ``router`` divides its top-k probabilities by their sum, which a replay must do too."""
    flag = getattr(router, "norm_topk_prob", RENORMALISED.get(type(router).__name__))
    if flag is None:
        raise TypeError(f"routing=replay: {type(router).__name__} has no norm_topk_prob; say whether it renormalises "
                        "its top-k weights in scalerl/models/routing.py's RENORMALISED")
    return bool(flag)


def is_moe(model: torch.nn.Module) -> bool:
    return any(is_topk_router(m) for m in model.modules())


class RouterHooks:
    """The hooks on one model's routers, in layer order. ``RouterHooks.of(model)``: the model's own
    (made once, shared by the generator and the trainer that share the model), None for a dense model."""

    def __init__(self, model: torch.nn.Module):
        self.routers = [m for m in model.modules() if is_topk_router(m)]
        self.top_k = int(self.routers[0].top_k)
        self.seen: list[Optional[torch.Tensor]] = [None] * len(self.routers)
        self._replay: Optional[torch.Tensor] = None  # (n, L, k) long, -1: not recorded
        self._route: Optional[Callable] = None
        for i, router in enumerate(self.routers):
            router.register_forward_hook(self._hook(i))

    @classmethod
    def of(cls, model: torch.nn.Module) -> Optional["RouterHooks"]:
        hooks = model.__dict__.get(ATTR)
        if hooks is None and is_moe(model):
            hooks = cls(model)
            model.__dict__[ATTR] = hooks  # a plain attribute, not a submodule: state dicts stay as they are
        return hooks

    @property
    def layers(self) -> int:
        return len(self.routers)

    def _hook(self, i: int):
        def hook(module, args, out):
            logits, weights, experts = out
            if self._replay is not None:
                recorded = self._replay[:, i].to(experts.device)
                probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
                w, experts = self._route(probs, experts, recorded, norm_topk_prob=renormalises(module))
                weights = w.to(weights.dtype)
            self.seen[i] = experts.detach()
            return logits, weights, experts
        return hook

    def take(self, shape: tuple[int, int]) -> torch.Tensor:
        """The experts of the last forward over ``shape`` = (B, T) positions: (B, T, L, k) int16."""
        out = torch.stack([s.view(*shape, self.top_k) for s in self.seen], dim=2).to(torch.int16)
        self.seen = [None] * self.layers
        return out

    @contextmanager
    def replaying(self, experts: Optional[torch.Tensor], route: Optional[Callable]) -> Iterator[None]:
        """Forwards inside use ``route`` on ``experts`` (B, T, L, k), -1 where none was recorded, for
        their B x T positions; ``experts`` or ``route`` None: the routers' own choice."""
        if experts is None or route is None:
            yield
            return
        self._replay, self._route = experts.reshape(-1, *experts.shape[2:]).long(), route
        try:
            yield
        finally:
            self._replay, self._route = None, None


def right_align(experts: torch.Tensor, width: int) -> torch.Tensor:
    """Prompt experts (P, W, L, k), left-padded like their prompts, as (P, width, ...): the last
    ``width`` columns, or -1 columns added on the left."""
    w = experts.shape[1]
    if w >= width:
        return experts[:, w - width:]
    pad = experts.new_full((experts.shape[0], width - w, *experts.shape[2:]), -1)
    return torch.cat([pad, experts], dim=1)
