"""The policy update: per-token loss (``recipe.loss``), reduction
(``recipe.aggregate``), backward and an AdamW step per minibatch.

Minibatches are global: the step's kept groups, in batch order, split as
evenly as possible into ``batch.minibatches`` chunks (9 over 4 -> 3, 2, 2, 2),
and each rank trains on the part of a chunk it generated. Every rank joins
every minibatch, even one with no rows of its own there (a masked dummy
row keeps FSDP2's collectives in step), and each rank's loss is weighted by
its share of the chunk's units, so the summed gradient is the single-process
one: the same global batch gives the same update on any number of ranks.

Micro-batches (``train.micro_batch_tokens`` > 0): a rank's minibatch rows, longest first,
are cut into micro-batches of at most that many padded completion tokens (length bucketing:
each is padded to its own longest row, not the step's), each forward and backward in turn with
the gradients accumulated. The loss stays the aggregate of the whole minibatch: every
aggregation is linear in the per-token losses, so its per-token weights (the gradient of
``recipe.aggregate`` at the minibatch's mask) carry the right global prompt, sample or token
denominators into each micro-batch. Ranks agree on the micro-batch count (dummy rows pad the
shorter lists), so FSDP2's collectives stay in step.

A non-finite loss or gradient norm on any rank skips that minibatch's
optimizer step on all of them (the parameters stay finite, so a checkpoint
can never contain NaN) and is reported to the loop, which raises an alarm.
"""
from __future__ import annotations

import time
from typing import Optional

import torch

from scalerl.correction.mismatch import mismatch_stats
from scalerl.losses.base import CLIPPED, masked_mean, rare_tail_stats, rare_tokens
from scalerl.train.behaviour import behaviour_logprobs, fresh_tokens, group_rows
from scalerl.train.routed import forward_experts, load_metrics, routing_metrics, routing_record
from scalerl.train.sharding import clip_grad_norm

HEAD = ("units", "finite", "tokens", "loss")
"""Per-minibatch sums all-reduced in one collective, then token-weighted metric sums (``TOKEN_METRICS``
and the loss's own metrics, in sorted order)."""
TOKEN_METRICS = ("entropy", "abs_dlogp", "ratio_dev")


def minibatch_groups(trained: torch.Tensor, n_minibatches: int) -> list[list[int]]:
    """The kept group indices split into at most ``n_minibatches`` chunks, in order, whose sizes
    differ by at most one (groups stay whole; fewer kept groups than minibatches: one each)."""
    kept = trained.nonzero().flatten().tolist()
    n = min(n_minibatches, len(kept))
    if n == 0:
        return []
    q, r = divmod(len(kept), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [kept[bounds[i] : bounds[i + 1]] for i in range(n)]


def policy_update(trainer, optimizer, params, ro, adv, trained, recipe, *, minibatches: int, grad_clip: float,
                  temperature: float, rank_groups: slice, dist, micro_batch_tokens: int = 0,
                  version: Optional[int] = None, lagged=None) -> dict:
    """Train on this rank's rollout ``ro`` (the groups ``rank_groups`` of the step's batch).

    trainer: ``CompletionLogits`` (FSDP2-sharded or not); adv: (P, G) and trained: (P,) for
    the whole global batch (identical on every rank). ``version``: the trainer's version before
    this update; the mismatch metrics count the rows wholly sampled by it (staleness 0; None: every token)
    and, with ``lagged`` (``behaviour.LaggedWeights``), groups wholly sampled by the version before.
    """
    group = ro.correct.shape[1]
    device = ro.gen.tokens.device
    adv_rows = adv[rank_groups].flatten().to(device)  # (P_local*G,)
    chunks = []
    for chunk in minibatch_groups(trained, minibatches):
        groups = [g - rank_groups.start for g in chunk if rank_groups.start <= g < rank_groups.stop]  # this rank's share, local indices
        rows = group_rows(groups, group, device)
        chunks.append((groups, rows))
    beh = None  # a correction's π_old and weights: one extra forward before the first update (behaviour.py)
    if recipe.needs_old_logp and chunks:
        beh = behaviour_logprobs(trainer, ro, chunks, lambda g, r: _rows_inputs(ro, adv_rows, g, r, group, version=version), recipe,
                                 temperature)
    lag, lag_s = None, 0.0  # the mismatch one version back, before the update overwrites the weights kept
    if lagged is not None:
        t0 = time.perf_counter()
        lag = lagged.logprobs(trainer, ro, version, lambda g, r: _rows_inputs(ro, adv_rows, g, r, group), temperature)
        lag_s = time.perf_counter() - t0
        lagged.remember(version)
    done: list[dict] = []
    probe: list = []  # the first minibatch's (logp, behav, fresh): it precedes any update this step
    tail: list = []  # every forward's rare tokens' (ratio, clipped or None): the rare-token tail (losses/base.py)
    nonfinite, train_tokens, idle = 0, 0, 0
    for k, (groups, rows) in enumerate(chunks):
        optimizer.zero_grad(set_to_none=True)
        idle += int(not groups)
        first = probe if k == 0 and beh is None else None
        if micro_batch_tokens > 0:
            stats, names = _accumulate_micro_batches(trainer, ro, adv_rows, groups, rows, group, recipe, temperature,
                                                     micro_batch_tokens, dist, beh=beh, version=version, probe=first,
                                                     tail=tail)
        else:
            x = _rows_inputs(ro, adv_rows, groups, rows, group, beh=beh, version=version)
            loss, sums, names = _forward_loss(trainer, x, recipe, temperature, probe=first, tail=tail)
            units = float(sums[0])
            stats = dist.all_sum(sums)  # (len(HEAD) + len(names),) float64: one collective
            global_units = stats[0].item()
            # Weighted by this rank's share of the units; FSDP2 averages gradients over ranks, hence x world.
            # Every rank always runs the backward, so the sharded collectives stay in step.
            (loss * (units * dist.world / global_units if global_units else 0.0)).backward()
        global_units = stats[0].item()
        gnorm = clip_grad_norm(params, grad_clip)
        if not global_units:  # no trainable token in the whole chunk
            optimizer.zero_grad(set_to_none=True)
            continue
        if stats[1] < dist.world or not torch.isfinite(gnorm):
            optimizer.zero_grad(set_to_none=True)
            nonfinite += 1
            continue
        optimizer.step()
        # Applied: free the gradients now (the next minibatch would), so the push and the next batch's
        # sampling (a generator's own copy of the weights, train/weights.py) do not sit on top of them.
        optimizer.zero_grad(set_to_none=True)
        # Each prompt is computed once per group (shared prefix), each completion token once.
        train_tokens += int(ro.prompt_mask[groups].sum() + ro.gen.present[rows].sum()) if groups else 0
        done.append(_metrics(stats, names, gnorm))
    out = {k: sum(d[k] for d in done) / len(done) for k in done[0]} if done else {}
    if done:  # the first minibatch precedes any update this step: pure generator-vs-trainer numerics
        out["logp_mismatch"], out["ratio_dev"] = done[0]["abs_dlogp"], done[0]["ratio_dev"]
        out.pop("abs_dlogp")
    pairs = []  # (trainer, generator) log-probs of the tokens the mismatch metrics count
    records, pred = [], None  # an MoE's routing records (train/routed.py) and the fresh tokens' pred_differ
    if beh is not None:
        fresh = torch.zeros_like(ro.gen.sampled)
        for groups, rows in chunks:
            if groups:
                fresh[rows] = fresh_tokens(ro, rows, version)
        out.update(beh.metrics)
        pairs.append((beh.old_logp.detach()[fresh], ro.gen.logprobs.detach()[fresh]))
        if beh.pred_differ is not None:
            records, pred = beh.routes, beh.pred_differ[fresh]
    elif probe:
        pairs.append((torch.cat([p[0][p[2]] for p in probe]).detach(), torch.cat([p[1][p[2]] for p in probe]).detach()))
        if all(p[3] is not None for p in probe):
            records, pred = [p[3] for p in probe], torch.cat([p[3]["pred_differ"][p[2]] for p in probe])
    if records:  # before the lagged pairs join: the routing split is of staleness 0's tokens only
        out.update(routing_metrics(records, *pairs[0], pred))
    if ro.gen.experts is not None and getattr(trainer, "routers", None) is not None:
        out.update(load_metrics(ro.gen, int(trainer.routers.routers[0].num_experts)))
    if lag is not None:
        pairs.append(lag)
        out.update(mismatch_lagged_tokens=int(lag[0].numel()), mismatch_forward_s=lag_s)
    if pairs:
        out.update(mismatch_stats(torch.cat([a for a, _ in pairs]), torch.cat([b for _, b in pairs])))
    if tail:  # this rank's tokens, every minibatch's ratio (after the earlier minibatches' updates)
        clips = [c for _, c in tail]
        out.update(rare_tail_stats(torch.cat([r for r, _ in tail]),
                                   None if any(c is None for c in clips) else torch.cat(clips)))
    out.update(nonfinite=nonfinite, train_tokens=train_tokens, idle_minibatches=idle)
    return out


def _rows_inputs(ro, adv_rows, groups, rows, group, beh=None, version=None):
    """The forward's and the loss's inputs for this rank's rows of a minibatch; with no rows,
    one masked dummy row (a one-token prompt and completion): FSDP2 needs every rank in every
    forward and backward. ``beh``: a correction's π_old (the loss's ratio is taken against it)
    and per-token weights; ``fresh``: the sampled tokens of the rows of staleness 0 (the mismatch metrics')."""
    dev = ro.gen.tokens.device
    if groups:
        x = dict(tokens=ro.gen.tokens[rows], present=ro.gen.present[rows], sampled=ro.gen.sampled[rows],
                 prompt_ids=ro.prompt_ids[groups], prompt_mask=ro.prompt_mask[groups], group=group,
                 behav=(ro.gen.logprobs if beh is None else beh.old_logp)[rows], adv=adv_rows[rows],
                 fresh=fresh_tokens(ro, rows, version))
        if beh is not None:
            x["weight"] = beh.weight[rows]
        if ro.gen.experts is not None:  # an MoE's recorded routing: per row, and per prompt (its group's first row)
            x["experts"], x["prompt_experts"] = ro.gen.experts[rows], ro.gen.prompt_experts[rows][::group]
        return x
    prompt_ids = ro.prompt_ids[:1, -1:]
    x = dict(tokens=prompt_ids.clone(), present=torch.ones((1, 1), dtype=torch.bool, device=dev),
             sampled=torch.zeros((1, 1), dtype=torch.bool, device=dev), prompt_ids=prompt_ids,
             prompt_mask=torch.ones((1, 1), dtype=torch.long, device=dev), group=1,
             behav=torch.zeros((1, 1), device=dev), adv=torch.zeros(1, device=dev),
             fresh=torch.zeros((1, 1), dtype=torch.bool, device=dev))
    if beh is not None:
        x["weight"] = torch.zeros((1, 1), device=dev)
    return x


def _forward_loss(trainer, x: dict, recipe, temperature, weights=None, units=0.0, probe=None, tail=None):
    """One forward: (loss, this forward's sums (HEAD then the token-weighted metric sums), names).
    ``weights`` None: the loss is ``recipe.aggregate`` of the rows (the whole minibatch); else the
    per-token aggregation weights (n, T) of these rows within their minibatch, of ``units``.
    ``probe``: a list that gets (logp, behav, fresh) of this forward, for the mismatch metrics;
    ``tail``: a list that gets its rare tokens' (ratio, clip mask or None), for the rare-token tail."""
    logp, entropy = trainer(x["prompt_ids"], x["prompt_mask"], x["tokens"], x["present"].long(), x["group"],
                            temperature=temperature, experts=forward_experts(x))  # (n, T) each; the head in chunks
    sampled, behav = x["sampled"], x["behav"]
    tok_loss, m = recipe.loss(logp, behav, x["adv"], sampled)
    clipped = m.pop(CLIPPED, None)  # (n, T) bool or None: the loss's per-token clip mask
    if "weight" in x:  # the correction's constant per-token weight (scalerl/correction)
        tok_loss = tok_loss * x["weight"]
    if probe is not None:
        probe.append((logp.detach(), behav, x["fresh"], routing_record(trainer, x)))
    if tail is not None:
        rare = rare_tokens(behav, sampled)  # (n, T)
        tail.append(((logp.detach() - behav)[rare].exp(), None if clipped is None else clipped[rare]))
    if weights is None:
        loss, units = recipe.aggregate(tok_loss, sampled, x["group"])
    else:
        loss = (tok_loss * weights).sum()
    with torch.no_grad():
        n_tok = float(sampled.sum())
        dlogp = logp.detach() - behav
        means = [entropy, dlogp.abs(), (dlogp.exp() - 1).abs()]
        means = [masked_mean(x, sampled) for x in means] + [torch.as_tensor(m[k]) for k in sorted(m)]
        means = torch.stack([x.detach().double().cpu().reshape(()) for x in means])
        head = torch.tensor([float(units), float(torch.isfinite(loss).item()), n_tok, float(loss.detach()) * float(units)],
                            dtype=torch.float64)
        # Token-weighted, so the all-reduced sums give exact global means; an empty mask adds nothing.
        sums = torch.cat([head, means * n_tok if n_tok else torch.zeros_like(means)])
    return loss, sums, [*TOKEN_METRICS, *sorted(m)]


def aggregation_weights(aggregate, mask: torch.Tensor, group: int) -> tuple[torch.Tensor, float]:
    """Per-token weights w (N, T) with ``aggregate(tok_loss, mask, group)[0] == (w * tok_loss).sum()``
    for every tok_loss, and the aggregate's units. Every aggregation (``aggregation/``) is linear
    in tok_loss, so w is its gradient, taken once at zero: the mask alone fixes the denominators."""
    x = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device, requires_grad=True)
    with torch.enable_grad():
        loss, units = aggregate(x, mask, group)
        (w,) = torch.autograd.grad(loss, x, allow_unused=True)
    return (torch.zeros_like(x) if w is None else w.detach()), float(units)


def micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Row positions cut into micro-batches of at most ``budget`` padded tokens (rows x longest),
    longest rows first, so each micro-batch pads only to its own longest row (length bucketing).
    A row longer than the budget is a micro-batch of its own.

    >>> micro_batches([3, 9, 2, 8, 1], budget=16)
    [[1], [3, 0], [2, 4]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if out and (len(out[-1]) + 1) * max(lengths[out[-1][0]], 1) <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def padding_fraction(lengths: list[int], parts: list[list[int]]) -> float:
    """Padded positions over all positions when each part is padded to its longest row."""
    padded = sum(len(p) * max(lengths[i] for i in p) for p in parts)
    return 1.0 - sum(lengths) / padded if padded else 0.0


def _accumulate_micro_batches(trainer, ro, adv_rows, groups, rows, group, recipe, temperature, budget, dist,
                              beh=None, version=None, probe=None, tail=None):
    """Forward and backward this rank's rows of a minibatch in micro-batches, the gradients
    accumulating to the single-forward ones. Returns the all-reduced sums and the metric names."""
    x = _rows_inputs(ro, adv_rows, groups, rows, group, beh=beh, version=version)
    weights, units = aggregation_weights(recipe.aggregate, x["sampled"], x["group"])  # (n, T)
    width = torch.arange(1, x["present"].shape[1] + 1, device=x["present"].device)
    lengths = (x["present"] * width).amax(-1).tolist() if groups else []  # last present position + 1
    parts = micro_batches(lengths, budget)
    counts = dist.all_cat(torch.tensor([[units, float(len(parts))]], dtype=torch.float64))  # (world, 2)
    global_units, n_parts = counts[:, 0].sum().item(), int(counts[:, 1].max().item())
    scale = dist.world / global_units if global_units else 0.0  # FSDP2 averages over ranks, hence x world
    dummy = _rows_inputs(ro, adv_rows, [], rows, group, beh=beh)
    total, names = None, None
    for k in range(max(n_parts, 1)):
        if k < len(parts):
            sel = torch.tensor(parts[k], dtype=torch.long, device=x["tokens"].device)
            t = max(lengths[i] for i in parts[k])
            part = {key: x[key][sel, :t] for key in ("tokens", "present", "sampled", "behav", "fresh", "weight", "experts")
                    if key in x}
            used, prompt_of = torch.unique(sel // group, return_inverse=True)  # the part's prompts, each row's
            if "experts" in x:
                part["prompt_experts"] = x["prompt_experts"][used]
            part.update(adv=x["adv"][sel], prompt_ids=x["prompt_ids"][used], prompt_mask=x["prompt_mask"][used],
                        group=prompt_of)
            w = weights[sel, :t]
        else:  # this rank ran out of rows: a masked dummy keeps the ranks' forwards in step
            part, w = dummy, torch.zeros((1, 1), device=x["tokens"].device)
        loss, sums, names = _forward_loss(trainer, part, recipe, temperature, weights=w, units=units, probe=probe,
                                          tail=tail)
        (loss * (units * scale)).backward()  # loss is over this rank's units, like the one-forward path's
        total = sums if total is None else total + sums
    # HEAD: units once (the whole minibatch's), finite only if every micro-batch was; the tokens and
    # loss x units add up (each micro-batch's loss is its part of the minibatch's).
    total[0], total[1] = units, float(total[1] == max(n_parts, 1))
    return dist.all_sum(total), names


def _metrics(stats: torch.Tensor, names: list[str], gnorm: torch.Tensor) -> dict:
    """Global minibatch metrics from the all-reduced sums."""
    units, tokens = stats[0].item(), max(stats[2].item(), 1.0)
    out = {name: stats[len(HEAD) + i].item() / tokens for i, name in enumerate(names)}
    return {**out, "loss": stats[3].item() / units, "grad_norm": float(gnorm)}
