"""Routing of a mixture of experts' tokens on the trainer's side (config group ``routing``).

A router picks each token's top-k experts from its logits; a generator and a trainer that differ
by bf16 rounding or by a few versions of staleness can send the same token through different
experts, a mismatch far larger than a dense model's rounding (docs/mismatch.md). The generator
records the experts it chose for every token at every layer (``Generation.experts``); an option
says which experts the trainer's forwards (π_old's and π_θ's) use:

``fn(probs (n, E), own (n, k), recorded (n, k), *, norm_topk_prob, cfg) -> (weights (n, k), experts (n, k))``
(the ``RouteFn`` contract in ``base.py``): ``none`` keeps the trainer's own choice, ``replay``
takes the recorded one (rollout routing replay, R3, arXiv 2510.11370) with the gate's own
scores (softmax probabilities, or Llama-4's sigmoids) as weights, so the gate is still trained.
Must not know about models or batches (``models/routing.py`` hooks an option into a model's
routers). To add one: a module here, ``conf/routing/<name>.yaml``, one line below.
"""
from scalerl.core.option import Option
from scalerl.routing import none, replay

ROUTINGS: dict[str, Option] = {
    "none": Option(none.OwnRoutingConfig, none.own_routing),
    "replay": Option(replay.ReplayConfig, replay.replayed_routing),
}
