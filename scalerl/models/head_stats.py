"""The chunked LM head's log-probs and entropies as one autograd function.

``chunked_token_stats`` (``policy.py``) runs this for the precision axis's linear heads
(``linear_head``: ``logits = linear(hidden.to(dt), weight.to(dt)).float()``). Why a function of
its own rather than ``torch.utils.checkpoint`` per chunk: under checkpoint, each chunk's backward
is autograd's, which returns that chunk's full (V, H) weight gradient and then adds it to the sum
of the chunks before it -- two (V, H) tensors at once (545 MB each at Qwen2's 151,936 x 896),
plus the gathered log-prob gradient and the softmax gradient, each (n, V). Here the backward
writes the softmax gradient over the recomputed log-probs in place and adds each chunk's weight
gradient into one buffer with ``addmm_``: one (V, H) tensor (the gradient itself) and two (n, V).

The arithmetic is the unchunked path's (``CompletionLogits`` -> update's temperature ->
``token_logprobs`` / ``token_entropy``) in the same dtypes: the matmul in the head's dtype, the
log-softmax in fp32, the gradient cast back to the head's dtype before the matmul's backward, as
autograd does. Only the order in which chunks' weight gradients are summed differs (float
rounding; ``tests/test_chunked_logprobs.py`` bounds it).
"""
from __future__ import annotations

import torch


NOT_LINEAR = object()


def linear_head_dtype(head):
    """The matmul dtype of a head function made by the precision axis's ``linear_head`` (None:
    the weight's dtype; it says so in ``linear_dtype``), or ``NOT_LINEAR`` for any other head
    function, whose arithmetic this module cannot redo (``chunked_token_stats`` then checkpoints
    it per chunk)."""
    return getattr(head, "linear_dtype", NOT_LINEAR)


def _chunk_logp(h: torch.Tensor, w: torch.Tensor, temperature: float) -> torch.Tensor:
    """(n, H), (V, H) in the head's dtype -> fp32 log-softmax (n, V); the logits are freed."""
    logits = torch.nn.functional.linear(h, w).float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


class LinearHeadStats(torch.autograd.Function):
    """hidden (M, H), weight (V, H), targets (M,) -> log p(target) (M,) fp32 with gradient, and
    the entropy (M,) fp32 without (a metric), ``chunk`` positions at a time. ``dtype``: the head's
    matmul dtype (None: the weight's)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, dtype, temperature: float, chunk: int):
        dt = weight.dtype if dtype is None else dtype
        w = weight.to(dt)  # no copy when the weight is already in the head's dtype
        m = hidden.shape[0]
        logp_out = torch.empty(m, dtype=torch.float32, device=hidden.device)
        ent_out = torch.empty(m, dtype=torch.float32, device=hidden.device)
        for s in range(0, m, chunk):
            logp = _chunk_logp(hidden[s : s + chunk].to(dt), w, temperature)
            y = targets[s : s + chunk]
            logp_out[s : s + chunk] = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            p = logp.exp()
            ent_out[s : s + chunk] = -p.mul_(logp).sum(-1)  # token_entropy's -(p * logp).sum(-1)
            del logp, p
        ctx.save_for_backward(hidden, weight, targets)
        ctx.dt, ctx.temperature, ctx.chunk = dt, temperature, chunk
        ctx.mark_non_differentiable(ent_out)
        return logp_out, ent_out

    @staticmethod
    def backward(ctx, g_logp, _g_ent):
        hidden, weight, targets = ctx.saved_tensors
        dt, temperature, chunk = ctx.dt, ctx.temperature, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        w = weight.to(dt)
        dh = torch.empty_like(hidden) if need_h else None
        # One (V, H) buffer for the whole weight gradient. Summed in the wider of the head's and
        # the weight's dtypes; addmm_ in place needs it to be the head's (the fp32-head default).
        acc = torch.promote_types(dt, weight.dtype)
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk].to(dt)
            y, g = targets[s : s + chunk], g_logp[s : s + chunk].float()
            # log_softmax's backward at the gathered gradient g*onehot(y): g*onehot(y) - softmax*g,
            # written over the recomputed log-probs (exp_ turns them into the softmax).
            d = _chunk_logp(h, w, temperature).exp_().mul_(-g.unsqueeze(-1))
            d.scatter_add_(-1, y.unsqueeze(-1), g.unsqueeze(-1))
            if temperature != 1.0:
                d.div_(temperature)
            d = d.to(dt)  # the backward of the head's .float()
            if need_h:
                dh[s : s + chunk] = (d @ w).to(hidden.dtype)
            if need_w:
                if acc == dt:
                    dw.addmm_(d.t(), h)
                else:  # a bf16 head on a wider weight: this chunk's gradient, then the sum
                    dw.add_(d.t() @ h)
            del d
        if need_w and dw.dtype != weight.dtype:
            dw = dw.to(weight.dtype)
        return dh, dw, None, None, None, None
