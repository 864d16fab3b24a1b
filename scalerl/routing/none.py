"""The trainer routes every token itself (the default): its forwards may send a token through other
experts than the generator did, and that part of the mismatch stays (docs/mismatch.md)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.routing.base import RoutingConfig, topk_weights


@dataclass
class OwnRoutingConfig(RoutingConfig):
    pass


def own_routing(probs, own, recorded, *, norm_topk_prob: bool, cfg: OwnRoutingConfig):
    """The router's own top-k and its weights (never called by the model hook: it leaves the router alone)."""
    return topk_weights(probs, own, norm_topk_prob), own
