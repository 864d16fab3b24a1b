"""scalerl's Llama module (``scalerl/models/llama.py``) against HF's own ``LlamaForCausalLM``
(eager, fp32) at the same weights, through the trainer's forward (``CompletionLogits``: a shared
left-padded prompt pass, then right-padded completions): log-probs to float rounding, gradients
of a loss to 1e-5 relative, with and without activation checkpointing; checkpoints moving both
ways; and the sampler's fast path running on it."""
import pytest
import torch
import transformers

from scalerl.generation.engines.torch_engine import left_pad
from scalerl.models.lean import LeanLlama, lean_supported
from scalerl.models.llama import LlamaConfig, LlamaForCausalLM
from scalerl.models.policy import CompletionLogits, checkpoint_layers, positions_from_mask
from scalerl.precision.base import linear_head

V = 40


def _hf(kv_heads=2, tie=False) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                                   pad_token_id=0, tie_word_embeddings=tie, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so a wrong norm weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _lean_copy(hf, tmp_path) -> LlamaForCausalLM:
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    return LlamaForCausalLM.from_pretrained(tmp_path / "hf")


def _batch(group=3):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (4, 7, 2)]
    p_ids, p_mask = left_pad(prompts, 0, "cpu")  # (3, 7)
    n = len(prompts) * group
    lengths = torch.randint(1, 9, (n,), generator=g)
    tokens = torch.randint(3, V, (n, 8), generator=g)
    t_mask = (torch.arange(8)[None] < lengths[:, None]).long()  # right padding
    return p_ids, p_mask, tokens * t_mask, t_mask, group


def _logp_and_grads(model, batch, ckpt=False):
    model.zero_grad(set_to_none=True)
    if ckpt:
        checkpoint_layers(model)
    p_ids, p_mask, tokens, t_mask, group = batch
    logp, _ = CompletionLogits(model, linear_head(torch.float32))(p_ids, p_mask, tokens, t_mask, group, temperature=0.7)
    weights = torch.linspace(-1, 2, tokens.numel()).view(tokens.shape)  # a loss with signs, per token
    (logp * weights * t_mask).sum().backward()
    return logp.detach()[t_mask.bool()], {n: p.grad for n, p in model.named_parameters()}


def _rel(a, b) -> float:
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


@pytest.mark.parametrize("kv_heads,tie", [(4, False), (2, False), (2, True)])  # MHA, GQA, a tied head
def test_logprobs_and_gradients_match_hf(tmp_path, kv_heads, tie):
    hf = _hf(kv_heads, tie)
    lean = _lean_copy(hf, tmp_path)
    batch = _batch()
    lp_hf, g_hf = _logp_and_grads(hf, batch)
    lp_lean, g_lean = _logp_and_grads(lean, batch)
    torch.testing.assert_close(lp_lean, lp_hf, rtol=0, atol=2e-6)
    assert g_lean.keys() == g_hf.keys()
    if not tie:  # the embedding's pad row takes no gradient, in both (tied, the head's row does)
        assert g_hf["model.embed_tokens.weight"][0].abs().sum() == 0 == g_lean["model.embed_tokens.weight"][0].abs().sum()
    worst = max(_rel(g_lean[n], g_hf[n]) for n in g_hf)
    assert worst < 1e-5, worst


def test_activation_checkpointing_leaves_the_gradients(tmp_path):
    lean = _lean_copy(_hf(), tmp_path)
    batch = _batch()
    lp, g = _logp_and_grads(lean, batch)
    lp_ck, g_ck = _logp_and_grads(lean, batch, ckpt=True)
    torch.testing.assert_close(lp_ck, lp, rtol=0, atol=0)
    assert max(_rel(g_ck[n], g[n]) for n in g) < 1e-6


def test_a_checkpoint_moves_both_ways(tmp_path):
    hf = _hf()
    lean = _lean_copy(hf, tmp_path)  # HF -> lean
    assert {k: v.equal(hf.state_dict()[k]) for k, v in lean.state_dict().items()} == {k: True for k in hf.state_dict()}
    with torch.no_grad():  # lean -> HF: new values, written by the lean module, read by transformers
        for p in lean.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    lean.save_pretrained(tmp_path / "lean")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "lean", dtype=torch.float32,
                                                             attn_implementation="eager", local_files_only=True)
    ids, mask = left_pad([[5, 6, 7, 8], [9, 10]], 0, "cpu")
    pos = positions_from_mask(mask)
    with torch.no_grad():
        a = torch.log_softmax(back(input_ids=ids, attention_mask=mask, position_ids=pos).logits, -1)
        b = torch.log_softmax(lean(ids, mask, pos).logits, -1)
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=0, atol=2e-6)
    assert not torch.equal(a, torch.log_softmax(hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits, -1))


def test_the_sampler_fast_path_runs_on_it(tmp_path):
    lean = _lean_copy(_hf(), tmp_path)
    assert lean_supported(lean)
    fast = LeanLlama(lean.get_decoder())
    ids, mask = left_pad([[5, 6, 7, 8], [9, 10]], 0, "cpu")
    pos = positions_from_mask(mask)
    with torch.no_grad():
        h = fast.forward(ids, mask, pos, fast.new_cache(8))
        full = lean.get_decoder()(ids, mask, pos).last_hidden_state
    torch.testing.assert_close(h[mask.bool()], full[mask.bool()], rtol=0, atol=1e-5)


def test_it_refuses_what_it_does_not_compute():
    base = dict(model_type="llama", vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64)
    LlamaConfig.from_dict(base)
    for key, value in [("attention_bias", True), ("mlp_bias", True), ("hidden_act", "gelu"), ("model_type", "qwen2"),
                       ("rope_parameters", {"rope_type": "llama3", "rope_theta": 1e4})]:
        with pytest.raises(ValueError, match=key.split("_")[0]):
            LlamaConfig.from_dict({**base, key: value})
