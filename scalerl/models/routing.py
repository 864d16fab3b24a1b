"""Record and replay a mixture of experts' routing, by forward hooks on its routers.

transformers' MoE routers come in two output formats, each read and written by a ``RouterFormat``:

- the top-k routers (Qwen3-MoE's ``Qwen3MoeTopKRouter``, Mixtral's, and their kin) return
  ``(router_logits (n, E), top-k weights (n, k), top-k experts (n, k))`` for the n = batch x time
  positions of one forward; the experts block then runs exactly the experts it is given;
- Llama-4's ``Llama4Router`` returns ``(router_scores (n, E), router_logits (n, E))``: the sigmoid of
  each chosen expert's logit, 0 for the others; its block runs every expert weighted by its score
  (an unchosen one adds nothing) beside an always-on shared expert.

A hook on each router therefore controls the routing without touching transformers' code:

- it always records the experts the block is about to use (``seen``, one (n, k) tensor per layer);
- inside ``replaying(experts, route)`` it replaces them: ``route`` (a ``routing`` option,
  ``scalerl/routing``) gets the router's own per-expert scores of its logits (a softmax, or
  Llama-4's sigmoids), so the weights of the replayed experts carry the gate's gradient, and the
  router's format writes them back in the form its block reads.

The generator records the experts it sampled with (``generation/engines/torch_engine.py``); the
trainer replays them (``policy.CompletionLogits``) or only records its own for the routing metrics
(``routing_*``, docs/outputs.md). A checkpointed layer's recompute would run its router again
outside the replay: ``routing=replay`` refuses ``model.activation_checkpointing``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch

ATTR = "_scalerl_router_hooks"


Module, Tensor = torch.nn.Module, torch.Tensor


class RouterFormat:
    """One kind of router's forward output: read as (logits (n, E), experts (n, k) long), the experts
    its block is about to run; written back from a replay's (weights (n, k) fp32, experts (n, k))."""

    def matches(self, router: Module) -> bool:
        raise NotImplementedError

    def read(self, router: Module, out: Any) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def scores(self, logits: Tensor) -> Tensor:
        """Every expert's score (n, E) fp32, from which the router takes its chosen experts' weights."""
        raise NotImplementedError

    def renormalises(self, router: Module) -> bool:
        """Whether the router divides its chosen experts' scores by their sum, which a replay must do too."""
        raise NotImplementedError

    def write(self, router: Module, out: Any, weights: Tensor, experts: Tensor) -> Any:
        raise NotImplementedError


RENORMALISED = {"MixtralTopKRouter": True}
"""Top-k routers without a ``norm_topk_prob`` attribute, and whether their forward renormalises its
top-k probabilities: Mixtral's always does (a softmax over the top-k logits, arXiv 2401.04088 §2.1)."""


class TopKFormat(RouterFormat):
    """transformers' ``*TopKRouter``: a ``weight`` (E, H), ``top_k`` and ``num_experts``; it returns
    ``(logits (n, E), top-k weights (n, k), top-k experts (n, k))``, the weights a softmax over the
    logits, renormalised where ``norm_topk_prob`` (or ``RENORMALISED``) says."""

    def matches(self, router: Module) -> bool:
        return type(router).__name__.endswith("TopKRouter") and hasattr(router, "top_k") and hasattr(router, "num_experts")

    def read(self, router: Module, out: Any) -> tuple[Tensor, Tensor]:
        logits, _, experts = out
        return logits, experts

    def scores(self, logits: Tensor) -> Tensor:
        return torch.softmax(logits, dim=-1, dtype=torch.float32)

    def renormalises(self, router: Module) -> bool:
        flag = getattr(router, "norm_topk_prob", RENORMALISED.get(type(router).__name__))
        if flag is None:
            raise TypeError(f"routing=replay: {type(router).__name__} has no norm_topk_prob; say whether it "
                            "renormalises its top-k weights in scalerl/models/routing.py's RENORMALISED")
        return bool(flag)

    def write(self, router: Module, out: Any, weights: Tensor, experts: Tensor) -> Any:
        logits, own, _ = out
        return logits, weights.to(own.dtype), experts


class SigmoidScoresFormat(RouterFormat):
    """Llama-4's ``Llama4Router`` (an ``nn.Linear`` with ``top_k``): it returns ``(scores (n, E),
    logits (n, E))``, the scores the sigmoid of each of the top-k logits and 0 elsewhere. Its experts
    are not in its output: they are the top-k of its logits, the same ``torch.topk`` call its forward
    makes. Independent sigmoids: never renormalised. A replay writes the sigmoids of the recorded
    experts' logits into zeros, which its block reads as before (an expert at 0 adds nothing)."""

    def matches(self, router: Module) -> bool:
        return type(router).__name__ == "Llama4Router" and hasattr(router, "top_k")

    def read(self, router: Module, out: Any) -> tuple[Tensor, Tensor]:
        _, logits = out
        return logits, torch.topk(logits, router.top_k, dim=1).indices

    def scores(self, logits: Tensor) -> Tensor:
        return torch.sigmoid(logits.float())

    def renormalises(self, router: Module) -> bool:
        return False

    def write(self, router: Module, out: Any, weights: Tensor, experts: Tensor) -> Any:
        own, logits = out
        return torch.zeros_like(own).scatter(1, experts, weights.to(own.dtype)), logits


FORMATS: tuple[RouterFormat, ...] = (TopKFormat(), SigmoidScoresFormat())
"""The router kinds scalerl hooks. A router of another kind (DeepSeek-V3's) is not hooked: nothing is
recorded or replayed and no ``routing_*`` metric is logged. To add one: a ``RouterFormat`` here."""


def router_format(module: Module) -> Optional[RouterFormat]:
    """The format of ``module``'s output if it is a router scalerl hooks, else None."""
    return next((f for f in FORMATS if f.matches(module)), None)


def is_moe(model: Module) -> bool:
    return any(router_format(m) is not None for m in model.modules())


class RouterHooks:
    """The hooks on one model's routers, in layer order. ``RouterHooks.of(model)``: the model's own
    (made once, shared by the generator and the trainer that share the model), None for a dense model."""

    def __init__(self, model: torch.nn.Module):
        found = [(m, router_format(m)) for m in model.modules()]
        self.routers = [m for m, f in found if f is not None]
        self.formats = [f for _, f in found if f is not None]
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
        fmt = self.formats[i]

        def hook(module, args, out):
            logits, experts = fmt.read(module, out)
            if self._replay is not None:
                recorded = self._replay[:, i].to(experts.device)
                weights, experts = self._route(fmt.scores(logits), experts, recorded,
                                               norm_topk_prob=fmt.renormalises(module))
                out = fmt.write(module, out, weights, experts)
            self.seen[i] = experts.detach()
            return out
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
