"""The policy: an HF causal LM body plus a precision-controlled LM head.

The generator goes through ``Policy`` and the trainer through
``CompletionLogits`` (one ``nn.Module``, the unit FSDP2 roots), both with the
precision axis's head functions (arXiv 2510.13786 §3.2, "FP32 LM head in both
generator and trainer"); only the head function differs per side.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

from scalerl.models.lean import LeanCache, LeanLlama, lean_supported
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


def _cache_kw(body) -> str:
    """transformers 5 renamed past_key_values -> cache; accept both."""
    params = inspect.signature(inspect.unwrap(type(body).forward)).parameters
    return "cache" if "cache" in params else "past_key_values"


def run_body(body, cache_kw: str, input_ids, attention_mask, position_ids, cache=None):
    """The decoder body. Returns (last hidden states (N, T, H), cache)."""
    kw = {cache_kw: cache, "use_cache": cache is not None}
    out = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kw)
    new_cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    return out.last_hidden_state, new_cache


class CompletionLogits(torch.nn.Module):
    """The trainer's forward as one module: logits predicting each completion token.

    One module so that FSDP2 can root it: the embeddings, the final norm and
    the LM head are gathered when it is called, the decoder layers (their own
    FSDP units) when the body reaches them. ``head`` is the precision axis's
    trainer-side head function. Returns untempered fp32 logits; the update
    divides them by the sampling temperature.
    """

    def __init__(self, model: PreTrainedModel, head: HeadFn):
        super().__init__()
        self.model = model
        self.head = head
        self._cache_kw = _cache_kw(model.get_decoder())

    def forward(self, prompt_ids, prompt_mask, tokens, token_mask, group: int = 1) -> torch.Tensor:
        """prompt_ids/prompt_mask (P, W) left-padded unique prompts; tokens/token_mask
        (P*group, T), grouped by prompt. The prompt is run once per group and its
        keys/values (with their gradients) are shared by the group's completions:
        the same function as a full forward of every prompt+completion, with
        1/group of the prompt compute. Returns (P*group, T, V) fp32.
        """
        body, kw = self.model.get_decoder(), self._cache_kw
        cache = DynamicCache()
        h_prompt, cache = run_body(body, kw, prompt_ids, prompt_mask, positions_from_mask(prompt_mask), cache=cache)
        if group > 1:
            cache.batch_repeat_interleave(group)
        # Token t's logits come from position t-1, so the last token is not fed: nothing reads
        # its hidden state, and causal attention keeps it out of every earlier one. A 1-token
        # completion still runs the pass (its output unused): under FSDP2 every rank must run
        # the same number of layer forwards, whatever its rows' widths.
        fed = max(tokens.shape[1] - 1, 1)
        pmask = prompt_mask.repeat_interleave(group, 0)  # (N, W)
        mask = torch.cat([pmask, token_mask[:, :fed]], dim=1)  # (N, W+fed)
        pos = positions_from_mask(mask)[:, pmask.shape[1] :]
        h, _ = run_body(body, kw, tokens[:, :fed], mask, pos, cache=cache)  # (N, fed, H)
        first = h_prompt[:, -1:].repeat_interleave(group, 0)  # last prompt position predicts token 0
        weight = self.model.get_output_embeddings().weight
        return self.head(torch.cat([first, h[:, : tokens.shape[1] - 1]], dim=1), weight).float()


class Policy:
    """The generator's view of a model: body plus the precision axis's heads.

    ``head_weight`` overrides the model's LM head weight on the generator side
    (a generator copy in bf16 keeps an fp32 head weight for the fp32 head).
    ``lean``: sample through ``LeanLlama`` where it supports the model (``lean.py``).
    """

    def __init__(self, model: PreTrainedModel, *, gen_head: HeadFn, train_head: HeadFn,
                 head_weight: torch.Tensor | None = None, lean: bool = True):
        self.model = model
        self.body = model.get_decoder()
        self.head_weight = model.get_output_embeddings().weight if head_weight is None else head_weight
        self.gen_head = gen_head
        self.train_head = train_head
        self._cache_kw = _cache_kw(self.body)
        self._trainer = None
        self.lean = LeanLlama(self.body) if lean and lean_supported(model) else None

    def new_cache(self, capacity: int):
        """An empty KV cache for ``hidden`` holding up to ``capacity`` positions per row."""
        return self.lean.new_cache(capacity) if self.lean is not None else DynamicCache()

    def hidden(self, input_ids, attention_mask, position_ids, cache=None):
        """Run the body. Returns (last hidden states (N, T, H), cache)."""
        if isinstance(cache, LeanCache):  # only from new_cache, so self.lean is set
            return self.lean.forward(input_ids, attention_mask, position_ids, cache), cache
        return run_body(self.body, self._cache_kw, input_ids, attention_mask, position_ids, cache)

    def logits(self, hidden: torch.Tensor, side: str) -> torch.Tensor:
        """Untempered logits in fp32 storage (values may carry bf16 rounding)."""
        head = self.gen_head if side == "gen" else self.train_head
        return head(hidden, self.head_weight).float()

    def completion_logits(self, prompt_ids, prompt_mask, tokens, token_mask, group: int = 1) -> torch.Tensor:
        """The trainer's logits (``CompletionLogits``) on this policy's own model."""
        if self._trainer is None:
            self._trainer = CompletionLogits(self.model, self.train_head)
        return self._trainer(prompt_ids, prompt_mask, tokens, token_mask, group)
