"""Rollout: draw prompts, sample G completions each, score them.

Returns everything the update needs, for this rank's shard of the step's
prompts. The only axis-specific behaviour is delegated: the length plan
(``LENGTHS``), the keep mask and refill policy (``FILTERS``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from scalerl.generation import Generation, SamplingParams
from scalerl.generation.torch_sampler import left_pad
from scalerl.length import LENGTHS


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
    texts: list[str]


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


def sample_and_score(problems, group: int, *, generator, tok, task, length_cfg, temperature, rng, device):
    """Generate ``group`` completions for each problem and grade them."""
    prompts = [encode_prompt(tok, p.prompt) for p in problems]
    plan = LENGTHS[length_cfg.name].fn(length_cfg, len(prompts) * group, rng)
    params = SamplingParams(
        max_new_tokens=length_cfg.max_new_tokens, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        temperature=temperature, n=group, interrupt_at=plan.interrupt_at,
        force_ids=encode_phrase(tok, plan.phrase), answer_budget=plan.answer_budget,
    )
    gen = generator.generate(prompts, params, rng)
    texts = decode_completions(tok, gen)
    correct = torch.tensor([task.reward(t, problems[i // group].answer) for i, t in enumerate(texts)],
                           dtype=torch.float32).view(len(problems), group)
    rewards = correct.clone()
    if plan.penalty is not None:  # DAPO overlong penalty: correct answers only
        rewards = rewards + plan.penalty(gen.lengths.cpu().float()).view_as(correct) * (correct > 0)
    ids, mask = left_pad(prompts, tok.pad_token_id, device)
    n_tok = int(mask.sum()) + int(gen.present.sum())
    return ids, mask, gen, correct, rewards, n_tok, texts


def encode_phrase(tok, phrase: str) -> list[int]:
    return tok(phrase, add_special_tokens=False)["input_ids"] if phrase else []


def rollout(step_prompts: list[int], task, *, group, keep_fn, refill_rounds, sampler, **gen_kw) -> Rollout:
    """One step's rollout for this rank's prompts.

    With ``refill_rounds`` > 0 (DAPO dynamic sampling), groups the filter would
    drop are replaced by fresh prompts from ``sampler`` until every group has
    signal or the rounds run out.
    """
    probs = [task.train[i] for i in step_prompts]
    ids, mask, gen, correct, rewards, n_tok, texts = sample_and_score(probs, group, task=task, **gen_kw)
    index = list(step_prompts)
    for _ in range(refill_rounds):
        keep = keep_fn(rewards)
        if bool(keep.all()):
            break
        new_index = sampler.next(int((~keep).sum()))
        new = sample_and_score([task.train[i] for i in new_index], group, task=task, **gen_kw)
        n_tok += new[5]
        ids, mask, gen, correct, rewards, texts, index = _replace_dropped(
            keep, new_index, new, ids, mask, gen, correct, rewards, texts, index, group)
    return Rollout(index, ids, mask, gen, correct, rewards, n_tok, texts)


def _replace_dropped(keep, new_index, new, ids, mask, gen, correct, rewards, texts, index, group):
    """Swap the dropped groups for freshly generated ones (same count)."""
    n_ids, n_mask, n_gen, n_correct, n_rewards, _, n_texts = new
    slots = (~keep).nonzero().flatten().tolist()
    rows_old = [s * group + g for s in slots for g in range(group)]
    ids, mask = _merge_padded(ids, mask, n_ids, n_mask, slots)
    merged = {}
    for name in ("tokens", "logprobs", "sampled", "present", "version"):
        old, upd = getattr(gen, name), getattr(n_gen, name)
        merged[name] = _merge_right(old, upd, rows_old)
    gen = Generation(truncated=_set_rows(gen.truncated, n_gen.truncated, rows_old),
                     interrupted=_set_rows(gen.interrupted, n_gen.interrupted, rows_old), **merged)
    correct, rewards = correct.clone(), rewards.clone()
    correct[slots], rewards[slots] = n_correct, n_rewards
    texts = list(texts)
    for j, r in enumerate(rows_old):
        texts[r] = n_texts[j]
    index = list(index)
    for j, s in enumerate(slots):
        index[s] = new_index[j]
    return ids, mask, gen, correct, rewards, texts, index


def _set_rows(old, upd, rows):
    out = old.clone()
    out[rows] = upd
    return out


def _merge_right(old, upd, rows):
    """Put ``upd`` rows into ``old`` at ``rows``, right-padding to a common width
    (padding is never attended to nor trained on: present/sampled are False there)."""
    w = max(old.shape[1], upd.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, w - t.shape[1]))
    out = pad(old).clone()
    out[rows] = pad(upd)
    return out


def _merge_padded(ids, mask, n_ids, n_mask, rows):
    """Left-padded variant of ``_merge_right`` for prompts (pad ids are masked out)."""
    w = max(ids.shape[1], n_ids.shape[1])
    padl = lambda t: torch.nn.functional.pad(t, (w - t.shape[1], 0))
    ids, mask = padl(ids).clone(), padl(mask).clone()
    ids[rows], mask[rows] = padl(n_ids), padl(n_mask)
    return ids, mask
