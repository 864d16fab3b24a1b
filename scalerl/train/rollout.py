"""Rollout: draw prompts, sample G completions each, score them.

Returns everything the update needs, for this rank's shard of the step's
prompts. The only axis-specific behaviour comes from the run's recipe: the
length plan (``recipe.plan_lengths``), the keep mask and the refill rounds
(``recipe.keep``, ``recipe.refill_rounds``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from scalerl.generation import Generation, SamplingParams
from scalerl.generation.torch_sampler import left_pad


@dataclass
class Rollout:
    prompt_index: list[int]
    """(P,) train-pool indices of this rank's prompts."""
    prompt_ids: torch.Tensor
    """(P, W) left-padded prompt ids, one row per prompt (its G completions share it)."""
    prompt_mask: torch.Tensor
    gen: Generation
    correct: torch.Tensor
    """(P, G) raw task reward (1 = correct)."""
    rewards: torch.Tensor
    """(P, G) reward after length shaping; what advantages are computed from."""
    gen_tokens: int
    """Tokens the generator processed: each prompt once (shared prefill) plus every
    generated token, refill rounds included."""


@functools.lru_cache(maxsize=1 << 16)
def _encode(tok, text: str) -> tuple[int, ...]:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id
    return tuple(([bos] if bos is not None else []) + ids)


def encode_prompt(tok, text: str) -> list[int]:
    """Prompt ids with BOS prepended if the tokenizer has one (cached: prompts recur every epoch)."""
    return list(_encode(tok, text))


def decode_completions(tok, gen: Generation) -> list[str]:
    """Completion text up to (not including) EOS; pads and EOS removed."""
    keep = (gen.present & (gen.tokens != tok.eos_token_id)).cpu().tolist()
    rows = [[t for t, k in zip(row, ks) if k] for row, ks in zip(gen.tokens.cpu().tolist(), keep)]
    backend = getattr(tok, "backend_tokenizer", None)  # fast path: skips per-token Python checks
    if backend is not None:
        return backend.decode_batch(rows, skip_special_tokens=False)
    return tok.batch_decode(rows, skip_special_tokens=False)


@dataclass
class Request:
    """What a generator is asked for: one batch's prompts and sampling settings, plus what
    scoring its completions needs afterwards (the problems and the length plan's penalty)."""

    problems: list
    index: list[int]
    prompts: list[list[int]]
    params: SamplingParams
    penalty: Optional[Callable[[torch.Tensor], torch.Tensor]]


def make_request(problems, index, group: int, *, tok, plan_lengths, max_new_tokens: int, temperature,
                 rng) -> Request:
    """Encode the prompts and draw the batch's length plan from ``rng``."""
    prompts = [encode_prompt(tok, p.prompt) for p in problems]
    plan = plan_lengths(len(prompts) * group, rng)
    params = SamplingParams(
        max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        temperature=temperature, n=group, interrupt_at=plan.interrupt_at,
        force_ids=encode_phrase(tok, plan.phrase), answer_budget=plan.answer_budget,
    )
    return Request(list(problems), list(index), prompts, params, plan.penalty)


def score(req: Request, gen: Generation, group: int, *, tok, task, device) -> Rollout:
    """Grade the completions of ``req`` (wherever they were generated) into a ``Rollout``."""
    texts = decode_completions(tok, gen)
    correct = torch.tensor([task.reward(t, req.problems[i // group].answer) for i, t in enumerate(texts)],
                           dtype=torch.float32).view(len(req.problems), group)
    rewards = correct.clone()
    if req.penalty is not None:  # DAPO overlong penalty: correct answers only
        rewards = rewards + req.penalty(gen.lengths.cpu().float()).view_as(correct) * (correct > 0)
    ids, mask = left_pad(req.prompts, tok.pad_token_id, device)
    return Rollout(req.index, ids, mask, gen, correct, rewards, int(mask.sum()) + int(gen.present.sum()))


def sample_and_score(problems, index, group: int, *, generator, tok, task, plan_lengths, max_new_tokens: int,
                     temperature, rng, device) -> Rollout:
    """Generate ``group`` completions for each problem and grade them."""
    req = make_request(problems, index, group, tok=tok, plan_lengths=plan_lengths, max_new_tokens=max_new_tokens,
                       temperature=temperature, rng=rng)
    gen = generator.generate(req.prompts, req.params, rng)
    return score(req, gen, group, tok=tok, task=task, device=device)


def encode_phrase(tok, phrase: str) -> list[int]:
    return tok(phrase, add_special_tokens=False)["input_ids"] if phrase else []


def rollout(step_prompts: list[int], task, *, group, keep_fn, refill_rounds, sampler, **gen_kw) -> Rollout:
    """One step's rollout for this rank's prompts.

    With ``refill_rounds`` > 0 (DAPO dynamic sampling), groups the filter would
    drop are replaced by fresh prompts from ``sampler`` until every group has
    signal or the rounds run out.
    """
    ro = sample_and_score([task.train[i] for i in step_prompts], step_prompts, group, task=task, **gen_kw)
    for _ in range(refill_rounds):
        keep = keep_fn(ro.rewards)
        if bool(keep.all()):
            break
        new_index = sampler.next(int((~keep).sum()))
        fresh = sample_and_score([task.train[i] for i in new_index], new_index, group, task=task, **gen_kw)
        ro = replace_groups(ro, (~keep).nonzero().flatten().tolist(), fresh)
    return ro


def replace_groups(ro: Rollout, slots: list[int], fresh: Rollout) -> Rollout:
    """``ro`` with its groups at ``slots`` replaced, in order, by ``fresh``'s groups."""
    group = ro.correct.shape[1]
    rows = [s * group + g for s in slots for g in range(group)]
    gen = Generation(**{f.name: _put(getattr(ro.gen, f.name), getattr(fresh.gen, f.name), rows)
                        for f in dataclasses.fields(Generation)})
    index = list(ro.prompt_index)
    for j, s in enumerate(slots):
        index[s] = fresh.prompt_index[j]
    return Rollout(index, _put(ro.prompt_ids, fresh.prompt_ids, slots, left=True),
                   _put(ro.prompt_mask, fresh.prompt_mask, slots, left=True), gen,
                   _put(ro.correct, fresh.correct, slots), _put(ro.rewards, fresh.rewards, slots),
                   ro.gen_tokens + fresh.gen_tokens)


def _put(old: torch.Tensor, new: torch.Tensor, idx: list[int], left: bool = False) -> torch.Tensor:
    """Copy of ``old`` with rows ``idx`` set to ``new``; 2-D tensors are padded to a common
    width (left for prompts). Padding is never attended to or trained on: its masks are 0."""
    if old.dim() == 2 and old.shape[1] != new.shape[1]:
        w = max(old.shape[1], new.shape[1])
        pad = lambda t: torch.nn.functional.pad(t, (w - t.shape[1], 0) if left else (0, w - t.shape[1]))
        old, new = pad(old), pad(new)
    out = old.clone()
    out[idx] = new
    return out
