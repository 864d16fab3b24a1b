"""An MoE's routing, generator against trainer, on one forward's rows (the ``routing_*`` metrics,
docs/outputs.md). The generator recorded the experts of every token it fed (``Generation.experts``);
the trainer's forward leaves those it used in ``CompletionLogits.routed``."""
from __future__ import annotations

from typing import Optional

import torch

from scalerl.models.policy import replay_columns
from scalerl.models.routing import right_align
from scalerl.routing.metrics import disagreement, expert_load, kl_by_agreement, set_differs


def forward_experts(x: dict) -> Optional[tuple]:
    """The recorded experts a forward over the rows ``x`` (``update._rows_inputs``) takes, or None."""
    return (x["prompt_experts"], x["experts"]) if "experts" in x else None


def routing_record(trainer, x: dict) -> Optional[dict]:
    """Right after the forward over ``x``: ``differ`` (n, fed, L) the completion positions' top-k sets
    differ, ``valid`` (n, fed) both sides routed the position, ``pred_differ`` (n, T) the position that
    predicts token t (the prompt's last for t = 0, else completion token t-1) differs at some layer,
    ``fresh`` (n,) the row is of staleness 0, ``stale`` (n,) it has sampled tokens and is not. None:
    a dense model or no recorded experts."""
    routed = getattr(trainer, "routed", None)
    if routed is None or "experts" not in x:
        return None
    used_prompt, used = routed  # (P, W, L, k), (n, fed, L, k)
    fed, dev = used.shape[1], used.device
    rec = replay_columns(x["experts"].to(dev), fed)
    valid = (rec >= 0).all(-1).all(-1) & x["present"][:, :fed].to(dev)
    differ = set_differs(used.long(), rec.long())  # (n, fed, L)
    last = set_differs(used_prompt[:, -1].long(), right_align(x["prompt_experts"].to(dev), used_prompt.shape[1])[:, -1].long())
    group = x["group"]
    last = last[group] if isinstance(group, torch.Tensor) else last.repeat_interleave(group, 0)  # (n, L)
    t = x["tokens"].shape[1]
    pred = torch.cat([last.any(-1, keepdim=True), (differ & valid[..., None]).any(-1)[:, : t - 1]], dim=1)
    fresh = x["fresh"].any(dim=1)
    stale = x["sampled"].any(dim=1) & ~fresh
    return {"differ": differ, "valid": valid, "pred_differ": pred, "fresh": fresh, "stale": stale}


def routing_metrics(records: list[dict], train_logp: torch.Tensor, gen_logp: torch.Tensor,
                    pred_differ: torch.Tensor) -> dict:
    """The disagreement at staleness 0 and across staleness, kept apart, over every record's valid
    positions, and the mismatch KL (staleness 0's tokens: ``train_logp``, ``gen_logp``) split by
    ``pred_differ``, (n,) each."""
    out = {}
    for suffix, rows in (("", "fresh"), ("_stale", "stale")):
        parts = [r["differ"][r["valid"] & r[rows][:, None]] for r in records]
        out.update(disagreement(torch.cat(parts) if parts else torch.zeros((0, 1), dtype=torch.bool), suffix))
    if train_logp.numel():
        out.update(kl_by_agreement(train_logp, gen_logp, pred_differ))
    return out


def load_metrics(gen, num_experts: int) -> dict:
    """``routing_load_l{i}``: layer i's busiest expert over the mean, over the completion tokens the
    generator fed (its own routing: what the experts were asked to carry)."""
    fed = (gen.experts >= 0).all(-1).all(-1) & gen.present  # (N, T)
    return {f"routing_load_l{i}": v for i, v in enumerate(expert_load(gen.experts[fed], num_experts))}
