"""Batched KV-cache sampling with plain torch + transformers.

One prefill over the left-padded *unique* prompts, whose KV cache is then
repeated for the ``n`` samples of each (a group shares its prefix, so the
prompt is computed once, not G times), then one decode step per token for
the rows still generating: a finished row leaves the batch and the cache, so
one long completion does not keep 255 finished ones decoding. Length
interruptions (arXiv 2510.13786 §3.2) are handled here by forcing the phrase tokens into
rows that reach their sampled interruption point; forced tokens are fed
through the model like any other but are excluded from the loss.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch
from transformers import DynamicCache

from scalerl.generation.interface import Generation, SamplingParams
from scalerl.models.policy import Policy, positions_from_mask


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, P) ids and mask, left-padded to the longest prompt."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if len(p):
            ids[i, width - len(p) :] = torch.as_tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def sample_gumbel(logp: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
    """One draw per row from softmax(logp): argmax(logp + Gumbel noise).

    Exactly the categorical distribution, and cheaper than torch.multinomial
    for small vocabularies on CPU. logp (N, V) -> (N,) long.
    """
    u = torch.rand(logp.shape, generator=rng, device=logp.device, dtype=torch.float32).clamp_(min=1e-20)
    return (logp - torch.log(-torch.log(u))).argmax(-1)


class TorchGenerator:
    """Samples from ``policy`` in-process. In the synchronous loop that is the trainer's own
    model, so loading its state dict copies nothing and only moves the version."""

    def __init__(self, policy: Policy, device: torch.device):
        self.policy = policy
        self.device = device
        self.version = 0

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        # Runs between two generate calls: this engine decodes in the caller's thread.
        mine = self.policy.model.state_dict()
        for name, t in named_tensors:
            if mine[name].data_ptr() != t.data_ptr():
                mine[name].copy_(t)
        self.version = version

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, rng: torch.Generator, *,
                 between_steps: Optional[Callable[[int], None]] = None) -> Generation:
        pol, dev = self.policy, self.device
        n = len(prompts) * params.n
        ids, mask = left_pad(prompts, params.pad_token_id, dev)
        force = torch.as_tensor(list(params.force_ids), dtype=torch.long, device=dev)
        n_force = len(force)
        if params.interrupt_at is None or n_force == 0:
            interrupt_at = torch.full((n,), -1, dtype=torch.long, device=dev)
        else:
            interrupt_at = params.interrupt_at.to(dev)
        will_interrupt = interrupt_at >= 0
        # A row's hard cap: its free budget, or (interrupt point + phrase + answer).
        cap = torch.where(
            will_interrupt,
            interrupt_at + n_force + params.answer_budget,
            torch.full_like(interrupt_at, params.max_new_tokens),
        )
        max_len = int(cap.max()) if n else 0

        tokens = torch.full((n, max_len), params.pad_token_id, dtype=torch.long, device=dev)
        logps = torch.zeros((n, max_len), dtype=torch.float32, device=dev)
        sampled = torch.zeros((n, max_len), dtype=torch.bool, device=dev)
        present = torch.zeros((n, max_len), dtype=torch.bool, device=dev)
        versions = torch.zeros((n, max_len), dtype=torch.long, device=dev)
        stopped = torch.zeros(n, dtype=torch.bool, device=dev)
        interrupted = torch.zeros(n, dtype=torch.bool, device=dev)
        force_pos = torch.full((n,), -1, dtype=torch.long, device=dev)  # index into force, -1 = not forcing

        cache = DynamicCache()
        if between_steps is not None:
            between_steps(0)
        h, cache = pol.hidden(ids, mask, positions_from_mask(mask), cache=cache)  # (P, W, H)
        if params.n > 1:  # share each prompt's prefill across its n samples
            cache.batch_repeat_interleave(params.n)
            h, mask = h[:, -1:].repeat_interleave(params.n, 0), mask.repeat_interleave(params.n, 0)
        pos = positions_from_mask(mask)[:, -1:]  # (N, 1)
        rows = torch.arange(n, device=dev)  # the rows still decoding; finished rows leave the batch
        for t in range(max_len):
            logp = torch.log_softmax(pol.logits(h[:, -1], side="gen"), dim=-1)  # (n_live, V)
            tok = sample_gumbel(logp, rng)  # (n_live,)
            # Rows reaching their interruption point start forcing the phrase.
            fpos = force_pos[rows]
            start = will_interrupt[rows] & ~interrupted[rows] & (interrupt_at[rows] == t)
            fpos = torch.where(start, torch.zeros_like(fpos), fpos)
            interrupted[rows] |= start
            forcing = fpos >= 0
            if n_force:
                tok = torch.where(forcing, force[fpos.clamp(max=n_force - 1)], tok)
            tokens[rows, t] = tok
            logps[rows, t] = logp.gather(-1, tok[:, None]).squeeze(-1)
            sampled[rows, t] = ~forcing
            present[rows, t] = True
            versions[rows, t] = self.version  # an update in between_steps changes it mid-generation
            stop_now = ~forcing & (tok == params.eos_token_id)
            stopped[rows] |= stop_now
            fpos = torch.where(forcing, fpos + 1, fpos)
            force_pos[rows] = torch.where(fpos >= n_force, torch.full_like(fpos, -1), fpos)
            live = ~(stop_now | (t + 1 >= cap[rows]))
            if not bool(live.any()):
                break
            if not bool(live.all()):  # drop finished rows from the batch and the KV cache
                keep = live.nonzero().flatten()
                cache.batch_select_indices(keep)
                rows, tok, mask, pos = rows[keep], tok[keep], mask[keep], pos[keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos + 1
            if between_steps is not None:
                between_steps(t + 1)
            h, cache = pol.hidden(tok[:, None], mask, pos, cache=cache)
        width = int(present.sum(-1).max()) if n else 0
        return Generation(
            tokens=tokens[:, :width],
            logprobs=logps[:, :width],
            sampled=sampled[:, :width],
            present=present[:, :width],
            truncated=~stopped,
            interrupted=interrupted,
            version=versions[:, :width],
        )
