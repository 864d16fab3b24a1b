"""The policy update: per-token loss (``recipe.loss``), reduction
(``recipe.aggregate``), backward and an AdamW step per minibatch.

Minibatches are global: the step's kept groups, in batch order, split as
evenly as possible into ``batch.minibatches`` chunks (9 over 4 -> 3, 2, 2, 2),
and each rank trains on the part of a chunk it generated. Every rank joins
every minibatch, even one with no rows of its own there (a masked dummy
row keeps FSDP2's collectives in step), and each rank's loss is weighted by
its share of the chunk's units, so the summed gradient is the single-process
one: the same global batch gives the same update on any number of ranks.

A non-finite loss or gradient norm on any rank skips that minibatch's
optimizer step on all of them (the parameters stay finite, so a checkpoint
can never contain NaN) and is reported to the loop, which raises an alarm.
"""
from __future__ import annotations

import torch

from scalerl.losses.base import masked_mean
from scalerl.models.policy import token_entropy, token_logprobs
from scalerl.train.sharding import clip_grad_norm

HEAD = ("units", "finite", "tokens", "loss")
"""Per-minibatch sums all-reduced in one collective, then token-weighted metric sums (``TOKEN_METRICS``
and the loss's own metrics, in sorted order)."""
TOKEN_METRICS = ("entropy", "abs_dlogp", "ratio_dev")


def minibatch_groups(keep: torch.Tensor, n_minibatches: int) -> list[list[int]]:
    """The kept group indices split into at most ``n_minibatches`` chunks, in order, whose sizes
    differ by at most one (groups stay whole; fewer kept groups than minibatches: one each)."""
    kept = keep.nonzero().flatten().tolist()
    n = min(n_minibatches, len(kept))
    if n == 0:
        return []
    q, r = divmod(len(kept), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [kept[bounds[i] : bounds[i + 1]] for i in range(n)]


def policy_update(trainer, optimizer, params, ro, adv, keep, recipe, *, minibatches: int, grad_clip: float,
                  temperature: float, mine: slice, dist) -> dict:
    """Train on this rank's rollout ``ro`` (the groups ``mine`` of the step's batch).

    trainer: ``CompletionLogits`` (FSDP2-sharded or not); adv: (P, G) and keep: (P,) for
    the whole global batch (identical on every rank).
    """
    group = ro.correct.shape[1]
    device = ro.gen.tokens.device
    adv_rows = adv[mine].flatten().to(device)  # (P_local*G,)
    done: list[dict] = []
    nonfinite, train_tokens, idle = 0, 0, 0
    for chunk in minibatch_groups(keep, minibatches):
        groups = [g - mine.start for g in chunk if mine.start <= g < mine.stop]  # this rank's share, local indices
        rows = torch.tensor([g * group + j for g in groups for j in range(group)], dtype=torch.long, device=device)
        loss, sums, units, names = _minibatch_loss(trainer, ro, adv_rows, groups, rows, group, recipe, temperature)
        stats = dist.all_sum(sums)  # (len(HEAD) + len(names),) float64: one collective
        idle += int(not groups)
        global_units = stats[0].item()
        optimizer.zero_grad(set_to_none=True)
        # Weighted by this rank's share of the units; FSDP2 averages gradients over ranks, hence x world.
        # Every rank always runs the backward, so the sharded collectives stay in step.
        (loss * (units * dist.world / global_units if global_units else 0.0)).backward()
        gnorm = clip_grad_norm(params, grad_clip)
        if not global_units:  # no trainable token in the whole chunk
            optimizer.zero_grad(set_to_none=True)
            continue
        if stats[1] < dist.world or not torch.isfinite(gnorm):
            optimizer.zero_grad(set_to_none=True)
            nonfinite += 1
            continue
        optimizer.step()
        # Each prompt is computed once per group (shared prefix), each completion token once.
        train_tokens += int(ro.prompt_mask[groups].sum() + ro.gen.present[rows].sum()) if groups else 0
        done.append(_metrics(stats, names, gnorm))
    out = {k: sum(d[k] for d in done) / len(done) for k in done[0]} if done else {}
    if done:  # the first minibatch precedes any update this step: pure generator-vs-trainer numerics
        out["logp_mismatch"], out["ratio_dev"] = done[0]["abs_dlogp"], done[0]["ratio_dev"]
        out.pop("abs_dlogp")
    out.update(nonfinite=nonfinite, train_tokens=train_tokens, idle_minibatches=idle)
    return out


def _minibatch_loss(trainer, ro, adv_rows, groups, rows, group, recipe, temperature):
    """This rank's aggregated loss on its rows, the sums to all-reduce, its units and the metric names.

    A rank with no rows in the chunk runs one masked dummy row (a one-token
    prompt and completion): FSDP2 needs every rank in every forward and backward.
    """
    dev = ro.gen.tokens.device
    if groups:
        tokens, present, sampled = ro.gen.tokens[rows], ro.gen.present[rows], ro.gen.sampled[rows]
        prompt_ids, prompt_mask, g = ro.prompt_ids[groups], ro.prompt_mask[groups], group
        behav, adv = ro.gen.logprobs[rows], adv_rows[rows]
    else:
        prompt_ids, prompt_mask = ro.prompt_ids[:1, -1:], torch.ones((1, 1), dtype=torch.long, device=dev)
        tokens, present = prompt_ids.clone(), torch.ones((1, 1), dtype=torch.bool, device=dev)
        sampled = torch.zeros((1, 1), dtype=torch.bool, device=dev)
        behav, adv, g = torch.zeros((1, 1), device=dev), torch.zeros(1, device=dev), 1
    logits = trainer(prompt_ids, prompt_mask, tokens, present.long(), g)  # (n, T, V) fp32
    if temperature != 1.0:
        logits = logits / temperature
    logp = token_logprobs(logits, tokens)  # (n, T)
    tok_loss, m = recipe.loss(logp, behav, adv, sampled)
    loss, units = recipe.aggregate(tok_loss, sampled, g)
    with torch.no_grad():
        n_tok = float(sampled.sum())
        dlogp = logp.detach() - behav
        means = [token_entropy(logits.detach()), dlogp.abs(), (dlogp.exp() - 1).abs()]
        means = [masked_mean(x, sampled) for x in means] + [torch.as_tensor(m[k]) for k in sorted(m)]
        means = torch.stack([x.detach().double().cpu().reshape(()) for x in means])
        head = torch.tensor([float(units), float(torch.isfinite(loss).item()), n_tok, float(loss.detach()) * float(units)],
                            dtype=torch.float64)
        # Token-weighted, so the all-reduced sums give exact global means; an empty mask adds nothing.
        sums = torch.cat([head, means * n_tok if n_tok else torch.zeros_like(means)])
    return loss, sums, float(units), [*TOKEN_METRICS, *sorted(m)]


def _metrics(stats: torch.Tensor, names: list[str], gnorm: torch.Tensor) -> dict:
    """Global minibatch metrics from the all-reduced sums."""
    units, tokens = stats[0].item(), max(stats[2].item(), 1.0)
    out = {name: stats[len(HEAD) + i].item() / tokens for i, name in enumerate(names)}
    return {**out, "loss": stats[3].item() / units, "grad_norm": float(gnorm)}
