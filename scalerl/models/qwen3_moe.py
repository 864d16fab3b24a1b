"""scalerl's own Qwen3-MoE causal LM: ``model=tiny_moe``'s trainer and sampler module, without
transformers' modeling.

It is ``llama.py``'s module with Qwen3's two differences: an RMSNorm on each head's queries and
keys before the rotary embedding (``q_norm``, ``k_norm``), and every layer's MLP a sparse
mixture of experts. A softmax router over E experts picks the top k per token, their
probabilities renormalised to sum to 1 (``norm_topk_prob``), and the token's output is the
weighted sum of those experts' SwiGLU MLPs. It computes what transformers' ``Qwen3MoeForCausalLM``
computes (eager attention, fp32): the router's softmax in fp32, the experts run in expert order,
each over its tokens, summed into the output by ``index_add_``. The one difference in order is
that an expert's gate and up projections are two matmuls here and one fused matmul in
transformers 5, so log-probs agree to float rounding, not bit for bit (``tests/test_qwen3_moe.py``).

The experts are a ``ModuleList`` of MLPs under the names of the checkpoint file
(``model.layers.0.mlp.experts.3.gate_proj.weight``, as Qwen3-MoE checkpoints are published), so
a checkpoint moves between this module and transformers either way, unconverted. The router is a
``...TopKRouter`` with ``top_k``, ``num_experts`` and ``norm_topk_prob``, returning (logits,
top-k weights, top-k experts) as transformers' does: ``models/routing.py`` hooks it the same way
to record and replay the experts (R3). Refused on load, naming the key: dense layers among the
sparse ones (``mlp_only_layers``, ``decoder_sparse_step``), sliding windows, biases.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from scalerl.models.llama import MLP, DecoderLayer, LlamaConfig, LlamaForCausalLM, LlamaModel


class Qwen3MoeConfig(LlamaConfig):
    MODEL_TYPE = "qwen3_moe"
    DEFAULTS = dict(norm_topk_prob=False, mlp_only_layers=[], decoder_sparse_step=1, use_sliding_window=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Qwen3MoeConfig":
        c = super().from_dict(d)
        # transformers 5 writes num_local_experts (its attribute map); published checkpoints num_experts
        c.num_experts = d.get("num_experts", d.get("num_local_experts"))
        if not c.num_experts:
            raise ValueError("config.json has neither num_experts nor num_local_experts: not a mixture of experts")
        return c

    def unsupported(self) -> dict:
        return {"mlp_only_layers": bool(self.mlp_only_layers), "decoder_sparse_step": self.decoder_sparse_step != 1,
                "use_sliding_window": bool(self.use_sliding_window)}


class TopKRouter(nn.Module):
    """(n, H) -> (router logits (n, E), top-k weights (n, k), top-k experts (n, k))."""

    def __init__(self, c: Qwen3MoeConfig):
        super().__init__()
        self.top_k, self.num_experts, self.norm_topk_prob = c.num_experts_per_tok, c.num_experts, c.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(c.num_experts, c.hidden_size))

    def forward(self, h: torch.Tensor):
        logits = F.linear(h, self.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        top, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top.to(logits.dtype), experts


class Experts(nn.ModuleList):
    """E SwiGLU MLPs of width ``moe_intermediate_size``; each runs on the tokens routed to it."""

    def __init__(self, c: Qwen3MoeConfig):
        width = SimpleNamespace(hidden_size=c.hidden_size, intermediate_size=c.moe_intermediate_size)  # what MLP reads
        super().__init__(MLP(width) for _ in range(c.num_experts))
        self.num_experts = c.num_experts

    def forward(self, h: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """h (n, H), experts and weights (n, k) -> (n, H)."""
        out = torch.zeros_like(h)
        with torch.no_grad():
            hit = F.one_hot(experts, self.num_experts).permute(2, 1, 0)  # (E, k, n)
            used = hit.sum(dim=(1, 2)).nonzero().flatten().tolist()
        for e in used:
            slot, token = torch.where(hit[e])
            y = self[e](h[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        idle = [p for e in range(self.num_experts) if e not in used for p in self[e].parameters()]
        if idle and torch.is_grad_enabled():
            # An expert no token chose still gets a gradient, of zeros, as each expert's slice of
            # transformers' stacked (E, ...) tensors does: FSDP2 reduce-scatters the gradients that
            # exist, so ranks whose tokens chose different experts would otherwise hang, and AdamW
            # would skip the idle experts where transformers' would step them. Adding 0 changes no value.
            out = out + 0.0 * sum(p.sum() for p in idle)
        return out


class SparseMoeBlock(nn.Module):
    def __init__(self, c: Qwen3MoeConfig):
        super().__init__()
        self.gate = TopKRouter(c)
        self.experts = Experts(c)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        flat = h.reshape(-1, d)
        _, weights, experts = self.gate(flat)
        return self.experts(flat, experts, weights).reshape(b, t, d)


class Qwen3MoeDecoderLayer(DecoderLayer):
    qk_norm = True

    def feed_forward(self, c: Qwen3MoeConfig) -> nn.Module:
        return SparseMoeBlock(c)


class Qwen3MoeModel(LlamaModel):
    layer_class = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    config_class, body_class = Qwen3MoeConfig, Qwen3MoeModel
