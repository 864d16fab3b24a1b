"""A lean inference forward for Llama and Qwen3-MoE bodies with eager attention: the generator's fast path.

Sampling is most of a synchronous RL step on a CPU, and at the embedded model's size
(3 layers of width 96) the decode steps are bound by per-op work, not by FLOPs. This
computes exactly what Hugging Face's ``LlamaModel`` computes with
``attn_implementation="eager"`` (the embedded model's setting, ``conf/model/tiny.yaml``),
with fewer ops per layer:

- one matmul for q, k and v and one for gate and up (the weights are concatenated once
  per weight version, not per call: a weight push or an optimizer step bumps the tensors'
  version counters, which the cache key reads);
- the rotary cos/sin come from a table built once, by HF's own formula (the product
  position x inverse frequency, then cos and sin), so the values are the same; the sign
  of ``rotate_half`` is folded into the sin table;
- keys and values go into buffers allocated once per generation (``LeanCache``), not
  concatenated at every decode step;
- one additive mask per call, shared by the layers.

The RMSNorms are HF's own modules, and HF's order of operations is kept where it rounds
(scores scaled after the q·k product, softmax in fp32), so in fp32 the outputs agree with HF's to
float rounding (``tests/test_lean_decoder.py``). Only the generator uses it, under
``torch.no_grad``: the trainer's forward is the module's own (``llama.py`` for the embedded model,
HF's for ``model=hf``), with FSDP2's units.
Anything else (another architecture, sdpa or flash attention, rope scaling, biases,
attention dropout) runs HF's forward unchanged; ``model.attn_implementation=sdpa`` turns this path off.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from scalerl.models.qwen3_moe import Qwen3MoeConfig


def lean_supported(model) -> bool:
    """True when ``model``'s body is one this module computes exactly as HF does."""
    c = model.config
    rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    # a Qwen3-MoE: what scalerl's own module refuses, this forward does not compute either
    moe_ok = c.model_type != "qwen3_moe" or not any(Qwen3MoeConfig.unsupported(c).values())
    return (c.model_type in ("llama", "qwen3_moe") and moe_ok and getattr(c, "_attn_implementation", None) == "eager"
            and rope.get("rope_type", "default") == "default" and not getattr(c, "attention_bias", False)
            and not getattr(c, "mlp_bias", False) and c.hidden_act == "silu"
            and getattr(c, "pretraining_tp", 1) == 1 and not getattr(c, "attention_dropout", 0.0))


class LeanCache:
    """Per-layer key/value buffers of a fixed capacity (prompt width + decode budget).

    The same batch operations as HF's ``DynamicCache`` that the sampler uses: repeat each
    row (a prompt's prefill shared by its samples) and keep a subset of rows (finished
    rows leave the batch).
    """

    def __init__(self, n_layers: int, capacity: int):
        self.capacity = capacity
        self.length = 0
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this call's keys/values (B, heads, T, D); return all so far (views)."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"LeanCache: {end} positions exceed its capacity {self.capacity}")
        if self.keys[layer] is None:
            b, h, _, d = k.shape
            self.keys[layer] = k.new_empty(b, h, self.capacity, d)
            self.values[layer] = v.new_empty(b, h, self.capacity, d)
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        if layer == len(self.keys) - 1:
            self.length = end
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    # Both batch operations copy only the positions filled so far: the buffers' capacity is the whole
    # decode budget, so copying all of it made the sampler's cache moves a quarter of a held-out
    # eval (1,024 rows; benchmarks/RESULTS.md).
    def batch_repeat_interleave(self, repeats: int) -> None:
        n = self.length
        for bufs in (self.keys, self.values):
            for i, t in enumerate(bufs):
                b, h, cap, d = t.shape
                out = t.new_empty(b * repeats, h, cap, d)
                out.view(b, repeats, h, cap, d)[:, :, :, :n] = t[:, None, :, :n]
                bufs[i] = out

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows ``indices`` (ascending), moved to the front of the same buffers."""
        n, k = self.length, len(indices)
        for bufs in (self.keys, self.values):
            for i, t in enumerate(bufs):
                t[:k, :, :n] = t[indices, :, :n]  # the gather is a copy, so rows moving forward never overlap
                bufs[i] = t[:k]


class LeanLlama:
    """The inference forward of an HF Llama body (``model.get_decoder()``), see the module doc."""

    def __init__(self, body):
        self.body = body
        attn = body.layers[0].self_attn
        self.n_heads = body.config.num_attention_heads
        self.n_kv = body.config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        # The layers' parameters, listed once: the weight-version key is read before every call.
        self._params = [p for layer in body.layers for p in layer.parameters()]
        self._fused: list | None = None
        self._key: tuple | None = None
        self._tables: dict = {}

    def new_cache(self, capacity: int) -> LeanCache:
        return LeanCache(len(self.body.layers), capacity)

    def forget(self) -> None:
        """Drop the fused weights now (the generator's own were released, ``TorchGenerator.release``)."""
        self._fused = self._key = None

    def _weights(self) -> list[tuple]:
        """Per layer: (norm1, qkv, o, norm2, the q/k norms or None, the feed-forward), the weights
        concatenated once per weight version. The feed-forward is (gate_up, down) for a dense MLP,
        and a Qwen3-MoE's sparse block itself (its router is hooked: ``routing.py``)."""
        key = tuple((p.data_ptr(), p._version) for p in self._params)
        if key != self._key:
            self._fused = [(layer.input_layernorm, torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                            a.o_proj.weight, layer.post_attention_layernorm,
                            (a.q_norm, a.k_norm) if hasattr(a, "q_norm") else None,
                            (torch.cat([m.gate_proj.weight, m.up_proj.weight]), m.down_proj.weight)
                            if hasattr(m, "gate_proj") else m)
                           for layer in self.body.layers for a, m in [(layer.self_attn, layer.mlp)]]
            self._key = key
        return self._fused

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (B, 1, T, D) for these positions, from a table grown as needed."""
        rot = self.body.rotary_emb
        need = int(positions.max()) + 1 if positions.numel() else 1
        cos, sin = self._tables.get(dtype, (None, None))
        if cos is None or cos.shape[0] < need:
            n = max(need, self.body.config.max_position_embeddings)
            pos = torch.arange(n, device=rot.inv_freq.device, dtype=torch.float32)
            freqs = pos[:, None] * rot.inv_freq.float()[None, :]  # HF: position x inverse frequency
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos() * rot.attention_scaling, emb.sin() * rot.attention_scaling
            half = sin.shape[-1] // 2  # rotate_half(x) = (-x2, x1): roll(x) = (x2, x1) times (-sin, sin)
            sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
            cos, sin = cos.to(dtype), sin.to(dtype)
            self._tables[dtype] = (cos, sin)
        return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                cache: LeanCache) -> torch.Tensor:
        """input_ids/position_ids (B, T); attention_mask (B, S) over the cached and new
        positions (S = cache length + T). Returns the last hidden states (B, T, H)."""
        h = self.body.embed_tokens(input_ids)
        b, t, _ = h.shape
        nh, nkv, d = self.n_heads, self.n_kv, self.head_dim
        s = attention_mask.shape[1]
        cos, sin = self._rotary(position_ids, h.dtype)
        q_at = torch.arange(s - t, s, device=h.device)[:, None]
        k_at = torch.arange(s, device=h.device)[None, :]
        # Causal and not padding. A padding query may see itself, so no row is empty (its
        # output is never read: padding keys are masked for every real query).
        allowed = ((k_at <= q_at) & attention_mask.bool()[:, None, :]) | (k_at == q_at)
        bias = torch.zeros(allowed.shape, dtype=h.dtype, device=h.device)
        bias = bias.masked_fill_(~allowed, torch.finfo(h.dtype).min)[:, None]  # (B, 1, T, S)
        for i, (norm1, w_qkv, w_o, norm2, qk_norms, ffn) in enumerate(self._weights()):
            qkv = F.linear(norm1(h), w_qkv).view(b, t, nh + 2 * nkv, d).transpose(1, 2)
            qk = qkv[:, : nh + nkv]
            if qk_norms is not None:  # Qwen3: each head's queries and keys normed before the rotary embedding
                qk = torch.cat([qk_norms[0](qk[:, :nh]), qk_norms[1](qk[:, nh:])], dim=1)
            qk = qk * cos + qk.roll(d // 2, dims=-1) * sin
            k, v = cache.append(i, qk[:, nh:], qkv[:, nh + nkv :])
            if nkv != nh:
                k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
            scores = torch.matmul(qk[:, :nh], k.transpose(2, 3)) * self.scaling + bias
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(h.dtype)
            h = h + F.linear(torch.matmul(probs, v).transpose(1, 2).reshape(b, t, nh * d), w_o)
            if isinstance(ffn, tuple):
                gate, up = F.linear(norm2(h), ffn[0]).chunk(2, dim=-1)
                h = h + F.linear(F.silu(gate) * up, ffn[1])
            else:
                h = h + ffn(norm2(h))
        return self.body.norm(h)
