"""The policy: an HF causal LM body plus a precision-controlled LM head.

Generator and trainer both go through ``Policy`` so that the precision axis
(arXiv 2510.13786 §3.2, "FP32 LM head in both generator and trainer") is applied
identically on both sides; only the head function differs per side.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

from scalerl.precision.base import HeadFn


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position. logits (N, T, V) fp32, targets (N, T) -> (N, T)."""
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution. logits (N, T, V) -> (N, T)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


class Policy:
    """Wraps ``model`` (any ``AutoModelForCausalLM``); heads are per side."""

    def __init__(self, model: PreTrainedModel, *, gen_head: HeadFn, train_head: HeadFn, temperature: float = 1.0):
        self.model = model
        self.body = model.get_decoder()
        self.head_weight = model.get_output_embeddings().weight
        self.gen_head = gen_head
        self.train_head = train_head
        self.temperature = temperature
        # transformers 5 renamed past_key_values -> cache; accept both.
        params = inspect.signature(inspect.unwrap(type(self.body).forward)).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def hidden(self, input_ids, attention_mask, position_ids, cache=None):
        """Run the body. Returns (last hidden states (N, T, H), cache)."""
        kw = {self._cache_kw: cache, "use_cache": cache is not None}
        out = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kw)
        new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.last_hidden_state, new_cache

    def logits(self, hidden: torch.Tensor, side: str) -> torch.Tensor:
        """Temperature-scaled logits in fp32 storage (values may carry bf16 rounding)."""
        head = self.gen_head if side == "gen" else self.train_head
        return head(hidden, self.head_weight).float() / self.temperature

    def completion_logits(self, prompt_ids, prompt_mask, tokens, token_mask, group: int = 1) -> torch.Tensor:
        """Trainer-side logits predicting each completion token.

        prompt_ids/prompt_mask (P, W) left-padded unique prompts; tokens/token_mask
        (P*group, T), grouped by prompt. The prompt is run once per group and its
        keys/values (with their gradients) are shared by the group's completions:
        the same function as a full forward of every prompt+completion, with
        1/group of the prompt compute. Returns (P*group, T, V) fp32.
        """
        cache = DynamicCache()
        h_prompt, cache = self.hidden(prompt_ids, prompt_mask, positions_from_mask(prompt_mask), cache=cache)
        if group > 1:
            cache.batch_repeat_interleave(group)
        pmask = prompt_mask.repeat_interleave(group, 0)  # (N, W)
        mask = torch.cat([pmask, token_mask], dim=1)  # (N, W+T)
        pos = positions_from_mask(mask)[:, pmask.shape[1] :]
        h, _ = self.hidden(tokens, mask, pos, cache=cache)  # (N, T, H)
        first = h_prompt[:, -1:].repeat_interleave(group, 0)  # last prompt position predicts token 0
        return self.logits(torch.cat([first, h[:, :-1]], dim=1), side="train")

