"""The trainer's log-probs at the behaviour weights, π_old, and the mismatch they measure.

A correction other than ``none`` (``scalerl/correction``) weighs each token by
w_t = π_old(y_t) / π_gen(y_t). π_old is the trainer's own log-prob under the weights before
this step's update: one extra forward without gradient over the rank's kept rows, one forward a
minibatch, before the first optimizer step. It keeps no activations, but it is not cut into
``train.micro_batch_tokens`` micro-batches as the update is (docs/limitations.md).
Every rank runs as many forwards as every other (a masked dummy row where it has none), so
FSDP2's collectives stay in step. Its time is the step row's ``correction_forward_s``.

The mismatch metrics (``correction/mismatch.py``) are taken over the rows of staleness 0
(every token sampled by the weights the trainer holds before its update), so staleness never enters them
(docs/mismatch.md): from π_old where a correction computed it, else from the update's first
minibatch forward, which also precedes any update. Under PipelineRL few rows are of staleness 0
(the generators stay a batch ahead), so ``LaggedWeights`` also measures up to
``train.mismatch_groups`` groups wholly of the version before, with a kept copy of its weights.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from scalerl.train.routed import forward_experts, routing_record


@dataclass
class Behaviour:
    old_logp: torch.Tensor
    """(N_local, T) π_old on this rank's rows (the generator's log-probs on rows no minibatch trains)."""
    weight: torch.Tensor
    """(N_local, T) the correction's per-token weight on the loss."""
    metrics: dict
    """The correction's own metrics and ``correction_forward_s``."""
    routes: list = field(default_factory=list)
    """An MoE's routing records of these forwards (``routed.routing_record``)."""
    pred_differ: Optional[torch.Tensor] = None
    """(N_local, T) an MoE's token t was predicted from a position routed otherwise than the generator routed it."""


def fresh_tokens(ro, rows: torch.Tensor, version: Optional[int]) -> torch.Tensor:
    """(n, T) bool: the sampled tokens of ``rows`` free of staleness at trainer ``version`` (None: all).

    A token is free of staleness only if its whole prefix was computed by the weights that sampled
    it: PipelineRL keeps a completion's KV cache across a weight push (arXiv 2510.13786 §3.1), so a
    token sampled after the push attends to keys and values of the older weights, the prompt's
    prefill included, and its log-prob differs from the trainer's recompute for a reason that is not
    numerics. So only whole rows whose every sampled token is of ``version`` count."""
    sampled = ro.gen.sampled[rows]
    return sampled if version is None else sampled & sampled_wholly_by(ro, rows, version)[:, None]


def sampled_wholly_by(ro, rows: torch.Tensor, version: int) -> torch.Tensor:
    """(n,) bool: the ``rows`` with a sampled token whose every sampled token is of ``version``."""
    sampled = ro.gen.sampled[rows]
    return ((ro.gen.version[rows] == version) | ~sampled).all(dim=1) & sampled.any(dim=1)


@torch.no_grad()
def behaviour_logprobs(trainer, ro, chunks: list[tuple[list[int], torch.Tensor]], inputs, recipe,
                       temperature: float) -> Behaviour:
    """π_old for the rows of each minibatch ``(groups, rows)`` of ``chunks``, then the correction's
    weights. ``inputs(groups, rows)``: the forward's inputs (``update._rows_inputs``)."""
    t0 = time.perf_counter()
    gen = ro.gen.logprobs
    old = gen.detach().clone()  # (N_local, T)
    trained = torch.zeros_like(ro.gen.sampled)
    routes, pred = [], None
    for groups, rows in chunks:
        x = inputs(groups, rows)
        logp, _ = trainer(x["prompt_ids"], x["prompt_mask"], x["tokens"], x["present"].long(), x["group"],
                          temperature=temperature, experts=forward_experts(x))  # (n, T)
        if groups:
            old[rows] = logp.to(old.dtype)
            trained[rows] = ro.gen.sampled[rows]
            record = routing_record(trainer, x)
            if record is not None:
                pred = torch.zeros_like(ro.gen.sampled) if pred is None else pred
                pred[rows] = record["pred_differ"]
                routes.append(record)
    weight, m = recipe.correct(old, gen, trained)
    metrics = {k: float(v) for k, v in m.items()}
    metrics["correction_forward_s"] = time.perf_counter() - t0
    return Behaviour(old_logp=old, weight=weight.detach(), metrics=metrics, routes=routes, pred_differ=pred)


def group_rows(groups: list[int], group: int, device) -> torch.Tensor:
    """The row indices of ``groups``, each of ``group`` completions, in order."""
    return torch.tensor([g * group + j for g in groups for j in range(group)], dtype=torch.long, device=device)


class LaggedWeights:
    """A copy of the trainer's weights one version back, to measure the mismatch on the groups that
    version sampled whole: under PipelineRL the generators stay a batch ahead, so nearly every
    completion is of staleness 1 and almost none of staleness 0 (docs/mismatch.md). One copy of
    the parameters, refreshed before each update; one forward without gradient over at most
    ``groups`` groups a step, run by swapping the copy in. One rank only: a sharded trainer's
    swap would have to keep every rank's forwards in step, and is not done."""

    def __init__(self, params: list, groups: int):
        self.params, self.groups = params, groups
        self.copy: Optional[list] = None
        self.version: Optional[int] = None

    @torch.no_grad()
    def remember(self, version: int) -> None:
        """Remember the weights as they are now, before the update: those of ``version``."""
        if self.copy is None:
            self.copy = [p.detach().clone() for p in self.params]
        else:
            for c, p in zip(self.copy, self.params):
                c.copy_(p.detach())
        self.version = version

    def _swap(self) -> None:
        for p, c in zip(self.params, self.copy):
            p.data, c.data = c.data, p.data

    @torch.no_grad()
    def logprobs(self, trainer, ro, version: Optional[int], inputs, temperature: float):
        """(train, gen): flat log-probs of the sampled tokens of up to ``groups`` of this rank's groups
        wholly sampled by the kept weights, both sides; None if the copy is not of ``version`` - 1 or
        no group qualifies. ``inputs(groups, rows)``: the forward's inputs (``update._rows_inputs``)."""
        if version is None or self.copy is None or self.version != version - 1:
            return None
        n_groups, group = ro.correct.shape
        sampled = ro.gen.sampled
        whole = sampled_wholly_by(ro, torch.arange(n_groups * group, device=sampled.device), self.version)
        picked = whole.view(n_groups, group).all(dim=1).nonzero().flatten()[: self.groups].tolist()
        if not picked:
            return None
        rows = group_rows(picked, group, sampled.device)
        x = inputs(picked, rows)
        self._swap()
        try:
            logp, _ = trainer(x["prompt_ids"], x["prompt_mask"], x["tokens"], x["present"].long(), x["group"],
                              temperature=temperature, experts=forward_experts(x))  # (n, T)
        finally:
            self._swap()
        mask = sampled[rows]
        return logp.detach()[mask], ro.gen.logprobs[rows][mask]
