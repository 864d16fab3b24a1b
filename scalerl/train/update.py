"""The policy update: per-token loss (``recipe.loss``), reduction
(``recipe.aggregate``), backward, gradient sync and an AdamW step per minibatch.

A non-finite loss or gradient norm skips that minibatch's optimizer step (the
parameters stay finite, so a checkpoint can never contain NaN) and is
reported to the loop, which raises an alarm.
"""
from __future__ import annotations

import math

import torch

from scalerl.losses.base import masked_mean
from scalerl.models.policy import token_entropy, token_logprobs


def minibatch_groups(keep: torch.Tensor, n_minibatches: int) -> list[list[int]]:
    """Split the kept group indices into ``n_minibatches`` near-equal chunks (groups stay whole)."""
    kept = keep.nonzero().flatten().tolist()
    size = math.ceil(len(kept) / n_minibatches) if kept else 0
    return [kept[i * size : (i + 1) * size] for i in range(n_minibatches)]


def policy_update(policy, optimizer, params, ro, adv, keep, recipe, *, minibatches: int, grad_clip: float,
                  dist) -> dict:
    """Train on this rank's rollout ``ro``. adv: (P, G); keep: (P,) bool."""
    group = ro.correct.shape[1]
    adv_rows = adv.flatten()  # (P*G,)
    done: list[dict] = []
    nonfinite, train_tokens = 0, 0
    for groups in minibatch_groups(keep, minibatches):
        rows = torch.tensor([g * group + j for g in groups for j in range(group)], dtype=torch.long)
        loss, metrics, units = _minibatch_loss(policy, ro, adv_rows, groups, rows, group, recipe)
        global_units = dist.all_sum(torch.tensor([float(units)])).item()
        if global_units == 0:
            continue
        optimizer.zero_grad(set_to_none=True)
        # Rescale so that summed gradients equal the single-process aggregate.
        scaled = loss * (units / global_units)
        ok = dist.all_sum(torch.tensor([float(torch.isfinite(loss).item())])).item() == dist.world
        if ok:
            scaled.backward()
            dist.sum_grads(params)
            gnorm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
            ok = bool(torch.isfinite(gnorm))
        if not ok:
            optimizer.zero_grad(set_to_none=True)
            nonfinite += 1
            continue
        optimizer.step()
        # Each prompt is computed once per group (shared prefix), each completion token once.
        train_tokens += int(ro.prompt_mask[groups].sum() + ro.gen.present[rows].sum())
        done.append({**metrics, "loss": float(loss.detach()), "grad_norm": float(gnorm)})
    out = {k: sum(d[k] for d in done) / len(done) for k in done[0]} if done else {}
    if done:  # the first minibatch precedes any update this step: pure generator-vs-trainer numerics
        out["logp_mismatch"], out["ratio_dev"] = done[0]["abs_dlogp"], done[0]["ratio_dev"]
        out.pop("abs_dlogp")
    out.update(nonfinite=nonfinite, train_tokens=train_tokens)
    return out


def _minibatch_loss(policy, ro, adv_rows, groups, rows, group, recipe):
    if len(rows) == 0:  # this rank has nothing to train on; still joins the collectives
        zero = sum(p.sum() for p in policy.model.parameters()) * 0.0
        return zero, {}, 0
    tokens, present, sampled = ro.gen.tokens[rows], ro.gen.present[rows], ro.gen.sampled[rows]
    logits = policy.completion_logits(ro.prompt_ids[groups], ro.prompt_mask[groups], tokens, present.long(), group=group)
    logp = token_logprobs(logits, tokens)  # (n, T)
    behav = ro.gen.logprobs[rows]
    tok_loss, m = recipe.loss(logp, behav, adv_rows[rows], sampled)
    loss, units = recipe.aggregate(tok_loss, sampled, group)
    with torch.no_grad():
        dlogp = logp.detach() - behav
        metrics = {
            "entropy": masked_mean(token_entropy(logits.detach()), sampled).item(),
            "abs_dlogp": masked_mean(dlogp.abs(), sampled).item(),
            "ratio_dev": masked_mean((dlogp.exp() - 1).abs(), sampled).item(),
            **{k: float(v) for k, v in m.items()},
        }
    return loss, metrics, units
