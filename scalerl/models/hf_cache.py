"""The trainer's caches for transformers' modeling (``model=hf``): imported only by a run whose
model is transformers' (``policy.CompletionLogits``), since importing transformers' cache and
modeling costs about 3 CPU-s per process (docs/testing.md). scalerl's own module uses
``policy.PromptKV`` and ``policy.PrefixKV``, the same semantics without transformers."""
from __future__ import annotations

import copy

import torch
from transformers import DynamicCache


class PromptCache(DynamicCache):
    """The prompt pass's cache: a repeated write to a layer replaces its keys/values instead of
    appending, so an activation-checkpointing replay of the pass leaves the same cache."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx < len(self.layers) and self.layers[layer_idx].is_initialized:
            layer = self.layers[layer_idx]
            layer.keys, layer.values = key_states, value_states
            return key_states, value_states
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class PrefixCache(DynamicCache):
    """The completion pass's read-only view of the prompt's keys/values: each layer attends to
    prefix + its own keys, and nothing is stored, so the pass is a pure function of its inputs and
    a checkpointed layer recomputes exactly what it computed (``model.activation_checkpointing``).
    The same values as ``DynamicCache``'s append (one concatenation either way)."""

    @classmethod
    def of(cls, prompt: DynamicCache) -> "PrefixCache":
        out = cls()
        out.layers = [copy.copy(layer) for layer in prompt.layers]  # own layer objects, shared tensors
        return out

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        layer = self.layers[layer_idx]
        return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)
