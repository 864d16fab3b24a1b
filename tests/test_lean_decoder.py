"""The generator's lean forward (``scalerl/models/lean.py``) against HF's own eager Llama:
hidden states through prefill, shared-prefix repeat, row drops and decode; fused weights
that follow in-place updates; the models it refuses; and the sampler's tokens either way."""
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from scalerl.config import compose, validate
from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad
from scalerl.models.lean import LeanCache, LeanLlama, lean_supported
from scalerl.models.policy import Policy, positions_from_mask, run_body, _cache_kw
from scalerl.precision.base import linear_head
from scalerl.train.run_plan import attn_implementation, resolve


def _llama(dtype=torch.float32, attn="eager", kv_heads=2, **extra) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                      attn_implementation=attn, **extra)
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    with torch.no_grad():  # norms away from 1 so a wrong norm weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _prompts(n=5):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 40, (int(k),), generator=g).tolist() for k in torch.randint(2, 9, (n,), generator=g)]


def _both_ways(model, repeat=3, steps=5):
    """Prefill, repeat, drop rows, decode: (lean, HF) last hidden states at each stage."""
    body, lean = model.get_decoder(), LeanLlama(model.get_decoder())
    ids, mask = left_pad(_prompts(), 0, "cpu")
    pos = positions_from_mask(mask)
    c_lean, c_hf = lean.new_cache(ids.shape[1] + steps), DynamicCache()
    h_lean = lean.forward(ids, mask, pos, c_lean)
    with torch.no_grad():
        h_hf, c_hf = run_body(body, _cache_kw(body), ids, mask, pos, c_hf)
    real = mask.bool()
    out = [(h_lean[real], h_hf[real])]  # padding positions are never read
    c_lean.batch_repeat_interleave(repeat)
    c_hf.batch_repeat_interleave(repeat)
    mask, pos = mask.repeat_interleave(repeat, 0), pos[:, -1:].repeat_interleave(repeat, 0)
    g = torch.Generator().manual_seed(2)
    drops = {2: torch.tensor([0, 2, 3, 7, 8, 11, 14]), 4: torch.tensor([1, 2, 5])}
    for t in range(steps):
        if t in drops:  # finished rows leave the batch (twice: the second from the trimmed buffers)
            keep = drops[t]
            c_lean.batch_select_indices(keep)
            c_hf.batch_select_indices(keep)
            mask, pos = mask[keep], pos[keep]
        tok = torch.randint(3, 40, (mask.shape[0], 1), generator=g)
        mask, pos = torch.cat([mask, torch.ones_like(mask[:, :1])], 1), pos + 1
        h_lean = lean.forward(tok, mask, pos, c_lean)
        with torch.no_grad():
            h_hf, c_hf = run_body(body, _cache_kw(body), tok, mask, pos, c_hf)
        out.append((h_lean, h_hf))
    return out


@pytest.mark.parametrize("kv_heads", [4, 2])  # multi-head and grouped-query attention
def test_lean_forward_equals_hf_eager_in_fp32(kv_heads):
    for lean, hf in _both_ways(_llama(kv_heads=kv_heads)):  # bit-identical where written
        assert lean.shape == hf.shape
        assert (lean - hf).abs().max() < 1e-5 * hf.abs().max()


def test_lean_forward_in_bf16_stays_within_bf16_rounding_of_hf():
    # Bit-identical on the machine this was written on; another CPU's kernels may round a fused
    # matmul differently, so allow a tenth of bf16's ulp (2^-8) on average.
    for lean, hf in _both_ways(_llama(torch.bfloat16)):
        assert lean.dtype == torch.bfloat16
        assert (lean.float() - hf.float()).abs().mean() < 4e-4 * hf.float().abs().mean()


def test_fused_weights_follow_in_place_updates():
    """A weight push or an optimizer step writes into the parameters: the next call must see it."""
    model = _llama()
    body, lean = model.get_decoder(), LeanLlama(model.get_decoder())
    ids, mask = left_pad(_prompts(), 0, "cpu")
    pos = positions_from_mask(mask)
    before = lean.forward(ids, mask, pos, lean.new_cache(ids.shape[1]))
    with torch.no_grad():
        body.layers[1].self_attn.k_proj.weight.mul_(1.5)
        body.layers[0].mlp.up_proj.weight.add_(0.1)
        hf, _ = run_body(body, _cache_kw(body), ids, mask, pos, DynamicCache())
    after = lean.forward(ids, mask, pos, lean.new_cache(ids.shape[1]))
    real = mask.bool()
    assert (after - before)[real].abs().max() > 1e-2
    assert (after - hf)[real].abs().max() < 1e-5 * hf.abs().max()


def test_lean_refuses_what_it_does_not_compute():
    assert lean_supported(_llama())
    assert not lean_supported(_llama(attn="sdpa"))
    assert not lean_supported(_llama(attention_bias=True))
    assert not lean_supported(_llama(attention_dropout=0.1))
    assert not lean_supported(_llama(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    pol = Policy(_llama(attn="sdpa"), gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32))
    assert pol.lean is None and isinstance(pol.new_cache(8), DynamicCache)
    cache = LeanCache(n_layers=1, capacity=3)
    with pytest.raises(ValueError, match="capacity 3"):
        cache.append(0, torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))


def test_sampler_draws_the_same_tokens_lean_or_not():
    model = _llama()
    head = linear_head(torch.float32)
    params = SamplingParams(max_new_tokens=7, n=4, eos_token_id=5, pad_token_id=0, seeds=torch.arange(5))
    gens = [TorchGenerator(Policy(model, gen_head=head, train_head=head, lean=lean), torch.device("cpu"))
            .generate(_prompts(), params) for lean in (True, False)]
    assert gens[0].present.sum() < gens[0].present.numel()  # some rows stopped early and left the batch
    assert torch.equal(gens[0].tokens, gens[1].tokens) and torch.equal(gens[0].present, gens[1].present)
    assert (gens[0].logprobs - gens[1].logprobs).abs().max() < 1e-5


def test_the_tiny_model_is_eager_in_fp32_only():
    """``auto``: eager (then the lean sampler) where the body computes in fp32; in bf16 transformers'
    default, since eager's mask turns to -inf under FSDP2's input cast and NaNs reach the loss
    (tests/test_mixed_precision.py runs that bf16 step)."""
    cpu = torch.device("cpu")

    def resolved(*overrides):
        cfg = validate(compose(["logger=none", *overrides]))
        return attn_implementation(cfg, resolve(cfg, cpu, tok=None).body_dtype)

    assert resolved() == "eager"
    assert resolved("model.dtype=bfloat16") is None
    assert resolved("model.attn_implementation=sdpa") == "sdpa"
