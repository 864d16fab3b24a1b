"""Data types of the generation interface (see package docstring)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Protocol, Sequence

from scalerl.core.lazy import torch  # config composition imports this module: torch only when used


@dataclass
class SamplingParams:
    max_new_tokens: int
    """Token budget of the free (thinking) part of the completion."""
    eos_token_id: int
    pad_token_id: int
    temperature: float = 1.0
    """Sampling temperature: tokens are drawn from, and behaviour log-probs are of,
    softmax(logits / temperature). The trainer divides its logits by the same value."""
    n: int = 1
    """Completions per prompt (the group size). Output rows are grouped: prompt i owns
    rows i*n .. i*n+n-1. The prompt is prefilled once and its KV cache shared."""
    interrupt_at: torch.Tensor | None = None
    """(N,) long: after this many free tokens, force ``force_ids`` (ScaleRL
    length interruption). -1 or None: never interrupt."""
    force_ids: Sequence[int] = ()
    """Tokens appended at an interruption (the "time is up ... </think>" phrase)."""
    answer_budget: int = 0
    """Tokens the model may still sample after the forced phrase."""
    think_end_ids: Sequence[int] = ()
    """Token ids of the end-of-thinking marker (``</think>``). A row that has produced
    them is writing its answer and is never interrupted: the grader reads only the
    text after the last marker, so forcing the phrase there would lose the answer."""
    seeds: torch.Tensor | None = None
    """(len(prompts),) int64, one per prompt: sample j of prompt i draws all its randomness
    from (seeds[i], j, position) alone (see ``noise.py``), so a completion does not depend
    on the rank, batch or slot that generates it. None: seeds 0 .. len(prompts)-1."""


@dataclass
class Generation:
    tokens: torch.Tensor
    """(N, T) long completion tokens, ``pad`` after each row's end."""
    logprobs: torch.Tensor
    """(N, T) fp32 behaviour log-probs of each token under the generator (0 on pad)."""
    sampled: torch.Tensor
    """(N, T) bool: token was sampled by the policy (the loss mask; forced and pad tokens are False)."""
    present: torch.Tensor
    """(N, T) bool: token exists (sampled or forced); the attention mask of the completion."""
    truncated: torch.Tensor
    """(N,) bool: hit the budget without emitting EOS."""
    interrupted: torch.Tensor
    """(N,) bool: the interruption phrase was forced."""
    version: torch.Tensor
    """(N, T) long: policy version (optimizer step) that produced each token."""
    experts: Optional[torch.Tensor] = None
    """(N, T, L, k) int16: a mixture of experts' top-k experts at each of its L layers for completion
    token t, as the generator routed it when it fed the token (-1: never fed, e.g. a row's last token);
    None: a dense model, or an engine that does not record them (``routing``, docs/mismatch.md)."""
    prompt_experts: Optional[torch.Tensor] = None
    """(N, W, L, k) int16: the same for each row's prompt, left-padded like the prompt (-1 on padding)."""

    @property
    def lengths(self) -> torch.Tensor:
        return self.present.sum(-1)

    def to(self, device) -> Generation:
        """This generation with every tensor on ``device`` (itself if they already are there)."""
        device = torch.device(device)
        if self.tokens.device == device:
            return self
        return Generation(**{f.name: _to(getattr(self, f.name), device) for f in dataclasses.fields(self)})


LEFT_PADDED = ("prompt_experts",)
"""``Generation`` fields padded on the left, like the prompts; the others' columns are completion positions."""


def _to(t, device):
    return None if t is None else t.to(device)


class Generator(Protocol):
    """A sampler the trainer hands its weights to. The trainer never sees what is behind it."""

    version: int
    """Policy version (optimizer step) of the weights it samples with now."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                 between_steps: Optional[Callable[[int], None]] = None) -> Generation:
        """``len(prompts) * params.n`` completions, grouped by prompt; a pure function of
        the prompts, ``params`` (seeds included) and the weights. ``between_steps(t)`` runs
        before decode step t (t=0: before the prefill) and may call ``load_weights``: an
        in-flight update (sequences and KV cache are kept)."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """New weights (the trainer's full state dict, checkpoint names) as policy ``version``.

        They take effect between two decode steps: tokens sampled after the update
        carry ``version``; a completion in flight keeps its earlier tokens (and their
        KV cache) from the previous weights, as in PipelineRL (arXiv 2510.13786 §3.1).
        The tensors are copied before this returns: the trainer may change them next.
        """
        ...

    def close(self) -> None:
        """Release the engine (processes, memory); the generator is unusable after."""
        ...


def cat_generations(parts: Sequence[Generation], pad_id: int) -> Generation:
    """Stack the rows of several generations (e.g. the shards of several generator
    processes), right-padding each to the widest: pad tokens, 0 log-probs, masks False."""
    if len(parts) == 1:
        return parts[0]
    def cat(name: str):
        ts = [getattr(p, name) for p in parts]
        if any(t is None for t in ts):  # recorded by every part or by none
            return None
        return torch.cat([pad_columns(t, max(t.shape[1] for t in ts), pad_id if name == "tokens" else FILL.get(name, -1),
                                      name in LEFT_PADDED)
                          if t.dim() >= 2 else t for t in ts])

    return Generation(**{f.name: cat(f.name) for f in dataclasses.fields(Generation)})


FILL = {"tokens": None, "logprobs": 0.0, "sampled": False, "present": False, "version": 0}
"""What pads each ``Generation`` field's columns (tokens: the pad id; the experts: -1)."""


def pad_columns(t: torch.Tensor, width: int, value, left: bool = False) -> torch.Tensor:
    """``t`` (N, T, ...) with its columns (dim 1) padded with ``value`` to ``width``, on the right or the left."""
    if t.shape[1] >= width:
        return t
    fill = t.new_full((t.shape[0], width - t.shape[1], *t.shape[2:]), value)
    return torch.cat([fill, t] if left else [t, fill], dim=1)
