"""The trainer's log-probs and entropies computed in chunks of positions (the (N, T, V) logits
never held), with activation checkpointing per layer, against the unchunked path: the same
values, losses and gradients (docs/trainer-memory.md)."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from scalerl.models.policy import CompletionLogits, checkpoint_layers, chunked_token_stats, token_entropy, token_logprobs
from scalerl.precision.base import linear_head


def _llama(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).to(dtype).train()


def _batch(vocab, prompts=2, group=3, width=4, t=7, seed=1):
    """Left-padded prompts (one shorter) and ragged completions (a present prefix per row)."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(1, vocab, (prompts, width), generator=g)
    prompt_mask = torch.ones(prompts, width, dtype=torch.long)
    prompt_mask[0, :2] = 0
    tokens = torch.randint(1, vocab, (prompts * group, t), generator=g)
    lengths = torch.randint(1, t + 1, (prompts * group,), generator=g)
    lengths[0] = t
    present = torch.arange(t)[None] < lengths[:, None]
    return prompt_ids, prompt_mask, tokens, present.long(), group


def _loss(logp, present, seed=2):
    """A per-token loss with different weights per token (as an RL loss has)."""
    w = torch.randn(logp.shape, generator=torch.Generator().manual_seed(seed), dtype=logp.dtype)
    return (logp * w * present).sum()


def _run(trainer, batch, temperature, chunk):
    trainer.zero_grad(set_to_none=True)
    logp, ent = trainer(*batch, temperature=temperature, head_chunk=chunk)
    loss = _loss(logp, batch[3])
    loss.backward()
    return logp.detach(), ent, loss.detach(), {n: p.grad.clone() for n, p in trainer.named_parameters()}


def _assert_same(a, b, atol, rtol=0.0):
    for x, y in zip(a[:3], b[:3]):
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol)
    for name in a[3]:
        g, h = a[3][name], b[3][name]
        assert (g - h).abs().max() <= atol + rtol * g.abs().max(), name


def test_chunked_stats_equal_full_log_softmax_by_hand():
    """chunked_token_stats against token_logprobs / token_entropy on the full logits."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(2, 5, 6), torch.randn(11, 6)
    targets = torch.randint(0, 11, (2, 5))
    logits = (hidden @ weight.T) / 0.7
    for chunk in (1, 3, 10):
        lp, ent = chunked_token_stats(hidden, weight, linear_head(torch.float32), targets, 0.7, chunk)
        torch.testing.assert_close(lp, token_logprobs(logits, targets), atol=1e-6, rtol=0)
        torch.testing.assert_close(ent, token_entropy(logits), atol=1e-6, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_head_matches_the_full_logits_on_the_tiny_shape(temperature):
    model = _llama()
    trainer = CompletionLogits(model, linear_head(torch.float32))
    batch = _batch(50)
    n_pos = batch[2].numel()  # 6 rows x 7 = 42 positions
    full = _run(trainer, batch, temperature, n_pos)  # chunk >= N*T: the unchunked path
    for chunk in (1, 5, 8, n_pos - 1):  # 5 and 8 divide neither T=7 nor N*T=42
        _assert_same(_run(trainer, batch, temperature, chunk), full, atol=1e-6, rtol=1e-6)  # a few fp32 ulps
    # The unchunked path is the present one: logits, then log-softmax.
    logits = trainer(*batch) / temperature
    torch.testing.assert_close(full[0], token_logprobs(logits, batch[2]).detach(), atol=0, rtol=0)


def test_activation_checkpointing_gives_the_same_values_and_gradients():
    """Per-layer checkpointing replays each layer with the shared prompt cache: exact recompute."""
    batch = _batch(50)
    plain = _run(CompletionLogits(_llama(), linear_head(torch.float32)), batch, 1.0, 5)
    model = _llama()
    assert checkpoint_layers(model) == 2
    ckpt = _run(CompletionLogits(model, linear_head(torch.float32)), batch, 1.0, 5)
    _assert_same(ckpt, plain, atol=1e-6)


def test_rows_by_prompt_index_equal_grouped_rows():
    """A micro-batch passes each row's prompt index instead of a group size: same function."""
    trainer = CompletionLogits(_llama(), linear_head(torch.float32))
    batch = _batch(50)
    grouped = _run(trainer, batch, 1.0, 0)
    by_index = _run(trainer, (*batch[:4], torch.arange(2).repeat_interleave(3)), 1.0, 0)
    _assert_same(by_index, grouped, atol=1e-6)


def test_bf16_body_with_fp32_head_agrees_to_bf16_rounding():
    """The precision axis's fp32 head on a bf16 body: chunking changes nothing beyond rounding."""
    model = _llama(dtype=torch.bfloat16)
    trainer = CompletionLogits(model, linear_head(torch.float32))
    batch = _batch(50)
    full = _run(trainer, batch, 1.0, 10**6)
    for chunk in (4, 9):
        got = _run(trainer, batch, 1.0, chunk)
        _assert_same(got, full, atol=1e-2, rtol=2 ** -7)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunked_head_on_qwen2_half_b_shape(dtype):
    """Qwen2-0.5B's vocabulary (151,936), width, heads and tied head; 2 of its 24 layers, a few
    positions (the head is what chunking changes). Values to a few fp32 ulps; gradients to 1e-4 of
    their largest entry in fp32 -- a hidden state's gradient sums 151,936 vocabulary terms, whose
    order the chunking changes -- and to 1e-10 in fp64, where rounding no longer hides a bug."""
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                      num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                      max_position_embeddings=64)
    model = Qwen2ForCausalLM(cfg).to(dtype).train()
    trainer = CompletionLogits(model, linear_head(dtype))
    batch = _batch(151_936, prompts=1, group=2, width=3, t=5)
    full = _run(trainer, batch, 1.0, 10**6)
    assert full[1].min() > 5  # a random head: near-uniform over 151,936 tokens (ln V = 11.9)
    tol = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)
    for chunk in (3, 4):  # neither divides N*T = 10
        got = _run(trainer, batch, 1.0, chunk)
        for x, y in zip(got[:3], full[:3]):
            torch.testing.assert_close(x, y, **tol)
        grad_tol = 1e-4 if dtype == torch.float32 else 1e-10
        for name, g in full[3].items():
            assert (got[3][name] - g).abs().max() <= grad_tol * g.abs().max(), name
