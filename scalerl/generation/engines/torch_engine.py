"""Batched KV-cache sampling with plain torch + transformers.

One prefill over the left-padded *unique* prompts, whose KV cache is then
repeated for the ``n`` samples of each (a group shares its prefix, so the
prompt is computed once, not G times), then one decode step per token for
the rows still generating: a finished row leaves the batch and the cache, so
one long completion does not keep 255 finished ones decoding. Length
interruptions (arXiv 2510.13786 §3.2) are handled here by forcing the phrase tokens into
rows that reach their sampled interruption point while still thinking (a row
that wrote ``</think>`` itself is answering and is left alone); forced tokens
are fed through the model like any other but are excluded from the loss.
Tokens are drawn by inverse CDF from counter-based uniforms (``noise.py``).

In-flight weight updates (PipelineRL, arXiv 2510.13786 §3.1): ``between_steps(t)``
is called before the forward pass that produces token t's logits (t=0: before
the prefill); it may call ``load_weights``, and the tokens from then on record
the new version while the sequences and their KV cache (computed by the older
weights) are kept.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch

from scalerl.generation.engines.interface import Generation, SamplingParams
from scalerl.generation.engines.noise import row_keys, sample_inverse_cdf, uniforms
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


class TorchGenerator:
    """Samples from ``policy`` in-process. Sharing the trainer's module (the synchronous
    loop's default), a push copies nothing and only moves the version; owning a copy of
    the weights (a generator process, another body dtype), a push copies them in."""

    def __init__(self, policy: Policy, device: torch.device, round_to: Optional[torch.dtype] = None):
        """``round_to``: every weight this generator loads is rounded to it (its own copy only)."""
        self.policy = policy
        self.device = device
        self.round_to = round_to
        self.version = 0
        self._state: Optional[dict[str, torch.Tensor]] = None
        self._released: Optional[dict[str, torch.nn.Parameter]] = None
        """The parameters ``release`` emptied, by name, until ``load_weights`` fills every one again."""
        self._shapes: dict[int, torch.Size] = {}
        """Their shapes while emptied, by ``id`` (a tied weight once)."""

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy the trainer's tensors into this generator's weights (cast to its own dtype). After
        ``release``, every parameter must come: they are allocated again, then filled."""
        missing = set()
        if self._released is not None:
            for p in dict.fromkeys(self._released.values()):  # a tied weight once
                p.data = torch.empty(self._shapes.pop(id(p)), dtype=p.dtype, device=p.device)
            missing, self._released, self._state = set(self._released), None, None
            if getattr(self.policy, "lean", None) is not None:
                self.policy.lean.forget()  # its fused weights were the released ones
        if self._state is None:
            self._state = self.policy.model.state_dict()  # views of the parameters, by name
        for name, t in named_tensors:
            if name not in self._state:
                raise KeyError(f"weight push: the generator's model has no tensor {name!r}")
            missing.discard(name)
            if self.round_to is not None and self._state[name].is_floating_point():
                # Rounded in place even when the tensor was received straight into the weights
                self._state[name].copy_(t.to(self.round_to))
            elif self._state[name].data_ptr() != t.data_ptr():  # the trainer's own tensor: nothing to copy
                self._state[name].copy_(t)
        if missing:
            raise RuntimeError(f"weight push after release: {sorted(missing)[:3]} (of {len(missing)}) never came; "
                               "a released generator needs every weight")
        self.version = version

    def release(self) -> None:
        """Free this generator's own weights until the next ``load_weights``, which must bring them all:
        a sampler with a copy of its own that idles while the trainer updates (``LocalSchedule``: the
        push that opens the next phase overwrites every weight) need not hold it through the update's
        peak (gradients and AdamW's state). Only for a copy of its own (``train/setup.own_sampler``),
        never the trainer's module."""
        if self._released is not None:
            return
        params = dict(self.policy.model.named_parameters(remove_duplicate=False))
        for p in dict.fromkeys(params.values()):
            self._shapes[id(p)] = p.shape
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        self._released, self._state = params, None
        if getattr(self.policy, "lean", None) is not None:
            self.policy.lean.forget()

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                 between_steps: Optional[Callable[[int], None]] = None) -> Generation:
        pol, dev = self.policy, self.device
        if self._released is not None:
            raise RuntimeError("generate() on a released generator: load_weights must bring its weights back first")
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
        seeds = params.seeds if params.seeds is not None else torch.arange(len(prompts))
        u = uniforms(row_keys(seeds.to(dev), params.n), max_len)  # (n, max_len) float64
        think = torch.as_tensor(list(params.think_end_ids), dtype=torch.long, device=dev)
        n_think = len(think)
        # Only rows about to be interrupted need to know whether they closed their thinking.
        last_at = int(interrupt_at.max()) if n and n_think else -1

        tokens = torch.full((n, max_len), params.pad_token_id, dtype=torch.long, device=dev)
        logps = torch.zeros((n, max_len), dtype=torch.float32, device=dev)
        sampled = torch.zeros((n, max_len), dtype=torch.bool, device=dev)
        present = torch.zeros((n, max_len), dtype=torch.bool, device=dev)
        versions = torch.zeros((n, max_len), dtype=torch.long, device=dev)
        stopped = torch.zeros(n, dtype=torch.bool, device=dev)
        interrupted = torch.zeros(n, dtype=torch.bool, device=dev)
        force_pos = torch.full((n,), -1, dtype=torch.long, device=dev)  # index into force, -1 = not forcing

        routers = pol.routers  # an MoE's: every forward's experts are recorded (``models/routing.py``)
        experts = prompt_experts = None
        if routers is not None:
            experts = torch.full((n, max_len, routers.layers, routers.top_k), -1, dtype=torch.int16, device=dev)

        if between_steps is not None:
            between_steps(0)
        cache = pol.new_cache(ids.shape[1] + max_len)
        h, cache = pol.hidden(ids, mask, positions_from_mask(mask), cache=cache)  # (P, W, H)
        if routers is not None:  # (P, W, L, k) -> one copy per row, -1 on the prompt's padding
            prompt_experts = routers.take(tuple(ids.shape)).masked_fill(~mask.bool()[:, :, None, None], -1)
            prompt_experts = prompt_experts.repeat_interleave(params.n, 0)
        if params.n > 1:  # share each prompt's prefill across its n samples
            cache.batch_repeat_interleave(params.n)
            h, mask = h[:, -1:].repeat_interleave(params.n, 0), mask.repeat_interleave(params.n, 0)
        pos = positions_from_mask(mask)[:, -1:]  # (N, 1)
        rows = torch.arange(n, device=dev)  # the rows still decoding; finished rows leave the batch
        for t in range(max_len):
            logits = pol.logits(h[:, -1], side="gen")  # (n_live, V) fp32
            if params.temperature != 1.0:
                logits = logits / params.temperature
            logp = torch.log_softmax(logits, dim=-1)
            tok = sample_inverse_cdf(logp, u[rows, t])  # (n_live,)
            # Rows reaching their interruption point while still thinking start forcing the phrase.
            fpos = force_pos[rows]
            start = will_interrupt[rows] & ~interrupted[rows] & (interrupt_at[rows] == t)
            if n_think <= t <= last_at and bool(start.any()):  # ...unless it wrote </think>: it is answering
                idx = start.nonzero().flatten()
                windows = tokens[rows[idx], :t].unfold(1, n_think, 1)  # (k, t - n_think + 1, n_think)
                start[idx] = ~(windows == think).all(-1).any(-1)
            fpos = torch.where(start, torch.zeros_like(fpos), fpos)
            interrupted[rows] |= start
            forcing = fpos >= 0
            if n_force:
                tok = torch.where(forcing, force[fpos.clamp(max=n_force - 1)], tok)
            tokens[rows, t] = tok
            logps[rows, t] = logp.gather(-1, tok[:, None]).squeeze(-1)
            sampled[rows, t] = ~forcing
            present[rows, t] = True
            versions[rows, t] = self.version  # the weights that ran this token's forward pass and head
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
            if routers is not None:  # the experts of token t, as it was fed
                experts[rows, t] = routers.take((len(rows), 1))[:, 0]
        width = int(present.sum(-1).max()) if n else 0
        return Generation(
            tokens=tokens[:, :width],
            logprobs=logps[:, :width],
            sampled=sampled[:, :width],
            present=present[:, :width],
            truncated=~stopped,
            interrupted=interrupted,
            version=versions[:, :width],
            experts=None if experts is None else experts[:, :width],
            prompt_experts=prompt_experts,
        )
