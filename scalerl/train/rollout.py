"""Rollout: draw prompts, sample G completions each, score them.

Returns everything the update needs, for this rank's shard of the step's
prompts. The only axis-specific behaviour comes from the run's recipe: the
length limits (``recipe.draw_lengths``), the groups trained on and the refill rounds
(``recipe.trains_on``, ``recipe.refill_rounds``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from scalerl.generation.engines import LEFT_PADDED, Generation, SamplingParams, left_pad, mix_seed, pad_columns

EXPERTS = ("experts", "prompt_experts")
"""An MoE's recorded routing (``Generation``): padded with -1, "not recorded"."""


@dataclass
class Rollout:
    prompt_index: list[int]
    """(P,) train-pool indices of this rank's prompts."""
    prompt_ids: torch.Tensor
    """(P, W) left-padded prompt ids, one row per prompt (its G completions share it)."""
    prompt_mask: torch.Tensor
    gen: Generation
    correct: torch.Tensor
    """(P, G) 1.0 where the answer is correct, else 0.0 (pass rates, NPR)."""
    rewards: torch.Tensor
    """(P, G) the training reward: ``task.correct_reward`` / ``task.wrong_reward`` (partial credit) plus length
    shaping; what the filter and the advantages see."""
    gen_tokens: int
    """Tokens the generator processed: each prompt once (shared prefill) plus every
    generated token, refill rounds included."""
    flags: dict[str, torch.Tensor] = field(default_factory=dict)
    """(P, G) per-completion outcome flags the task reports (code: timeout, crash)."""


@functools.lru_cache(maxsize=1 << 16)
def _encode(tok, text: str) -> tuple[int, ...]:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id
    if bos is None or (ids and ids[0] == bos):  # chat templates often write BOS themselves
        return tuple(ids)
    return tuple([bos] + ids)


def encode_prompt(tok, text: str) -> list[int]:
    """Prompt ids with BOS prepended if the tokenizer has one (cached: prompts recur every epoch)."""
    return list(_encode(tok, text))


def decode_completions(tok, gen: Generation) -> list[str]:
    """Completion text up to (not including) EOS; pads and EOS removed."""
    is_text = (gen.present & (gen.tokens != tok.eos_token_id)).cpu().tolist()
    rows = [[t for t, k in zip(row, ks) if k] for row, ks in zip(gen.tokens.cpu().tolist(), is_text)]
    backend = getattr(tok, "backend_tokenizer", None)  # fast path: skips per-token Python checks
    if backend is not None:
        return backend.decode_batch(rows, skip_special_tokens=False)
    return tok.batch_decode(rows, skip_special_tokens=False)


def prompt_seeds(seed: int, step: int, round_: int, n: int) -> torch.Tensor:
    """(n,) sampling seeds of one step's prompts, by their position in the global batch:
    the same completions whatever the number of ranks or generators (``generation/engines/noise.py``)."""
    return torch.tensor([mix_seed(seed, step, round_, i) for i in range(n)], dtype=torch.long)


def length_rng(seed: int, step: int, round_: int) -> torch.Generator:
    """The generator a step's length limits are drawn from (for the whole global batch)."""
    return torch.Generator().manual_seed(mix_seed(seed, step, round_, 1 << 40))


@dataclass
class Request:
    """What a generator is asked for: one batch's prompts and sampling settings, plus what
    scoring its completions needs afterwards (the problems and the length limits' penalty)."""

    problems: list
    index: list[int]
    prompts: list[list[int]]
    params: SamplingParams
    penalty: Optional[Callable[[torch.Tensor], torch.Tensor]]


def make_request(problems, index, group: int, *, seeds, limits, tok, max_new_tokens: int, temperature) -> Request:
    """Encode the prompts. seeds: (P,) per-prompt sampling seeds; limits: the length limits of
    these P*group rows."""
    prompts = [encode_prompt(tok, p.prompt) for p in problems]
    params = SamplingParams(
        max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        temperature=temperature, n=group, interrupt_at=limits.interrupt_at, seeds=seeds,
        force_ids=encode_phrase(tok, limits.phrase), answer_budget=limits.answer_budget,
        think_end_ids=encode_phrase(tok, limits.think_end),
    )
    return Request(list(problems), list(index), prompts, params, limits.penalty)


def score(req: Request, gen: Generation, group: int, *, tok, task, device) -> Rollout:
    """Grade the completions of ``req`` (wherever they were generated) into a ``Rollout``."""
    texts = decode_completions(tok, gen)
    grades = task.score(texts, [req.problems[i // group] for i in range(len(texts))])
    shape = (len(req.problems), group)
    correct = torch.tensor(grades.correct, dtype=torch.float32).view(shape)
    rewards = torch.tensor(grades.reward, dtype=torch.float32).view(shape)
    flags = {k: torch.tensor(v, dtype=torch.float32).view(shape) for k, v in grades.flags.items()}
    if req.penalty is not None:  # DAPO overlong penalty on correct answers, in units of half the reward gap
        gap = task.correct_reward - task.wrong_reward
        rewards = rewards + req.penalty(gen.lengths.cpu().float()).view_as(correct) * (gap / 2) * (correct > 0)
    ids, mask = left_pad(req.prompts, tok.pad_token_id, device)
    return Rollout(req.index, ids, mask, gen, correct, rewards, int(mask.sum()) + int(gen.present.sum()), flags)


def rollout_state(ro: Rollout) -> dict:
    """``ro`` as tensors and plain data (checkpoints load with ``weights_only=True``)."""
    gen = {f.name: getattr(ro.gen, f.name) for f in dataclasses.fields(Generation)}
    return {f.name: getattr(ro, f.name) for f in dataclasses.fields(Rollout) if f.name != "gen"} | {"gen": gen}


def rollout_from_state(state: dict, device) -> Rollout:
    """The inverse of ``rollout_state``, with the token tensors on ``device`` (per-group scores stay
    on the CPU, as ``score`` makes them)."""
    tokens = {k: state[k].to(device) for k in ("prompt_ids", "prompt_mask")}
    return Rollout(**{**state, **tokens, "gen": Generation(**state["gen"]).to(device)})


def rollout_share(ro: Rollout, groups: slice) -> Rollout:
    """The groups ``groups`` of ``ro``, as the rank that owns them would have sampled and scored them
    itself (``rollout(..., rank_groups=groups)``): prompt padding and completion columns trimmed to the
    share's widest row (``left_pad`` and the torch engine do the same), its own token count.
    Rank 0 of a pipeline_rl run splits the generators' batch with it (``pipeline.scatter_batch``)."""
    G = ro.correct.shape[1]
    rows = slice(groups.start * G, groups.stop * G)
    mask = ro.prompt_mask[groups]
    width = int(mask.sum(-1).max()) if mask.numel() else 0
    present = ro.gen.present[rows]
    length = int(present.sum(-1).max()) if present.numel() else 0
    gen = Generation(**{f.name: _cols(getattr(ro.gen, f.name), rows, slice(0, length), f.name in LEFT_PADDED)
                        for f in dataclasses.fields(Generation)})
    cut = slice(mask.shape[1] - width, mask.shape[1])
    ids, mask = ro.prompt_ids[groups][:, cut], mask[:, cut]
    return Rollout(ro.prompt_index[groups], ids, mask, gen, ro.correct[groups], ro.rewards[groups],
                   int(mask.sum()) + int(present.sum()), {k: v[groups] for k, v in ro.flags.items()})


def _cols(t: Optional[torch.Tensor], rows: slice, cols: slice, left: bool) -> Optional[torch.Tensor]:
    """Rows ``rows`` of a ``Generation`` field, its completion columns ``cols`` (a left-padded field,
    the prompts' experts, keeps its columns: right-aligned, extra padding is harmless); None stays None."""
    if t is None:
        return None
    t = t[rows]
    return t[:, cols] if t.dim() >= 2 and not left else t


def sample_and_score(problems, index, group: int, *, seeds, limits, generator, tok, task, max_new_tokens: int,
                     temperature, device) -> Rollout:
    """Generate ``group`` completions for each problem (in this process) and grade them."""
    req = make_request(problems, index, group, seeds=seeds, limits=limits, tok=tok, max_new_tokens=max_new_tokens,
                       temperature=temperature)
    return score(req, generator.generate(req.prompts, req.params), group, tok=tok, task=task, device=device)


@functools.lru_cache(maxsize=64)
def _encode_phrase(tok, phrase: str) -> tuple[int, ...]:
    return tuple(tok(phrase, add_special_tokens=False)["input_ids"]) if phrase else ()


def encode_phrase(tok, phrase: str) -> list[int]:
    return list(_encode_phrase(tok, phrase))


def rollout(step_prompts: list[int], rank_groups: slice, task, *, group, seed: int, step: int, draw_lengths, trains_on,
            refill_rounds, sampler, **gen_kw) -> Rollout:
    """One step's rollout for this rank's prompts ``step_prompts[rank_groups]``.

    Seeds and the length limits are drawn for the whole global batch and this
    rank takes its share, so the completions do not depend on the rank count.
    With ``refill_rounds`` > 0 (DAPO dynamic sampling, one rank), groups the
    filter would drop are replaced by fresh prompts from ``sampler`` until
    every group has signal or the rounds run out.
    """
    P = len(step_prompts)
    seeds = prompt_seeds(seed, step, 0, P)[rank_groups]
    limits = draw_lengths(P * group, length_rng(seed, step, 0)).select(slice(rank_groups.start * group, rank_groups.stop * group))
    idx = step_prompts[rank_groups]
    ro = sample_and_score([task.train[i] for i in idx], idx, group, seeds=seeds, limits=limits, task=task, **gen_kw)

    def draw(r: int, k: int) -> Rollout:
        new_index = sampler.next(k)
        return sample_and_score([task.train[i] for i in new_index], new_index, group, task=task,
                                seeds=prompt_seeds(seed, step, r, k), limits=draw_lengths(k * group, length_rng(seed, step, r)),
                                **gen_kw)

    return refill(ro, refill_rounds, trains_on, draw)


def refill(ro: Rollout, rounds: int, trains_on, draw) -> Rollout:
    """DAPO dynamic sampling: replace the groups the filter would drop (``trains_on(rewards)`` false)
    with ``draw(round, k)``'s k fresh groups, until every group has signal or ``rounds`` run out.
    Both schedules refill through this: the in-process rollout and the generator processes."""
    for r in range(1, rounds + 1):
        trained = trains_on(ro.rewards)
        if bool(trained.all()):
            break
        ro = replace_groups(ro, (~trained).nonzero().flatten().tolist(), draw(r, int((~trained).sum())))
    return ro


def replace_groups(ro: Rollout, slots: list[int], fresh: Rollout) -> Rollout:
    """``ro`` with its groups at ``slots`` replaced, in order, by ``fresh``'s groups."""
    group = ro.correct.shape[1]
    rows = [s * group + g for s in slots for g in range(group)]
    gen = Generation(**{f.name: _put(getattr(ro.gen, f.name), getattr(fresh.gen, f.name), rows,
                                     left=f.name in LEFT_PADDED, fill=-1 if f.name in EXPERTS else 0)
                        for f in dataclasses.fields(Generation)})
    index = list(ro.prompt_index)
    for j, s in enumerate(slots):
        index[s] = fresh.prompt_index[j]
    return Rollout(index, _put(ro.prompt_ids, fresh.prompt_ids, slots, left=True),
                   _put(ro.prompt_mask, fresh.prompt_mask, slots, left=True), gen,
                   _put(ro.correct, fresh.correct, slots), _put(ro.rewards, fresh.rewards, slots),
                   ro.gen_tokens + fresh.gen_tokens, {k: _put(v, fresh.flags[k], slots) for k, v in ro.flags.items()})


def _put(old: Optional[torch.Tensor], new: Optional[torch.Tensor], idx: list[int], left: bool = False,
         fill=0) -> Optional[torch.Tensor]:
    """Copy of ``old`` with rows ``idx`` set to ``new``; tensors of 2 or more dimensions are padded
    with ``fill`` to a common width (left for prompts). Padding is never attended to or trained on:
    its masks are 0. None (a field a dense model's generations lack) stays None."""
    if old is None or new is None:
        return None
    if old.dim() >= 2 and old.shape[1] != new.shape[1]:
        w = max(old.shape[1], new.shape[1])
        old, new = pad_columns(old, w, fill, left), pad_columns(new, w, fill, left)
    out = old.clone()
    out[idx] = new
    return out
