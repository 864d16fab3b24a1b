"""Data types of the generation interface (see package docstring)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Protocol, Sequence

if TYPE_CHECKING:
    import torch


@dataclass
class SamplingParams:
    max_new_tokens: int
    """Token budget of the free (thinking) part of the completion."""
    eos_token_id: int
    pad_token_id: int
    temperature: float = 1.0
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

    @property
    def lengths(self) -> torch.Tensor:
        return self.present.sum(-1)


class Generator(Protocol):
    """A sampler the trainer hands its weights to. The trainer never sees what is behind it."""

    version: int
    """Policy version (optimizer step) of the weights it samples with now."""

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, rng: torch.Generator, *,
                 between_steps: Optional[Callable[[int], None]] = None) -> Generation:
        """``len(prompts) * params.n`` completions, grouped by prompt. All randomness comes from ``rng``.
        ``between_steps(t)`` runs before decode step t (t=0: before the prefill) and may call
        ``load_weights``: an in-flight update."""
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
