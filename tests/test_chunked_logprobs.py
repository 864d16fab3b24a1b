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
    order the chunking changes -- and to 1e-10 in fp64, where rounding no longer hides a bug. In
    fp64 the head is also wrapped as a plain function, so it takes the checkpointed path, whose
    fp32 log-softmax is autograd's own kernel, bit for bit; the linear head's own backward
    (``LinearHeadStats``) computes the softmax with ``torch.exp``, an ulp off that kernel's, so it
    is held to fp32's 1e-6 in fp64 too.

    fp64 runs on a tenth of the vocabulary (15,193, odd like 151,936 is not: no chunk of it is
    aligned): at the full one its nine forward-backwards over 1.1 GB fp64 tensors took 220 s in CI.
    What fp64 is for -- the chunked arithmetic exact to 1e-10 -- does not depend on V (no code
    path branches on it), and a chunking bug still breaks it: dropping the last chunk's
    weight-gradient term, or a chunk's remainder, fails it by orders of magnitude (checked by
    mutating head_stats.py). The full vocabulary's rounding is what the fp32 case bounds."""
    vocab = 151_936 if dtype == torch.float32 else 15_193
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                      num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                      max_position_embeddings=64)
    model = Qwen2ForCausalLM(cfg).to(dtype).train()
    batch = _batch(vocab, prompts=1, group=2, width=3, t=5)
    linear = linear_head(dtype)
    heads = [(linear, 1e-6, 1e-4)] if dtype == torch.float32 else [(lambda h, w: linear(h, w), 1e-10, 1e-10),
                                                                  (linear, 1e-6, 1e-6)]
    for head, tol, grad_tol in heads:
        trainer = CompletionLogits(model, head)
        full = _run(trainer, batch, 1.0, 10**6)
        assert full[1].min() > 5  # a random head: near-uniform over V tokens (ln V = 11.9 or 9.6)
        for chunk in (3, 4):  # neither divides N*T = 10
            got = _run(trainer, batch, 1.0, chunk)
            for x, y in zip(got[:3], full[:3]):
                torch.testing.assert_close(x, y, atol=tol, rtol=tol)
            for name, g in full[3].items():
                assert (got[3][name] - g).abs().max() <= grad_tol * g.abs().max(), name


def _plain_stats(hidden, weight, targets, temperature, head_dtype):
    """The reference: full logits through autograd's own log-softmax (no chunks, no custom backward)."""
    logits = linear_head(head_dtype)(hidden, weight).float() / temperature
    return token_logprobs(logits, targets), token_entropy(logits.detach())


def _stats_and_grads(fn, hidden, weight, targets):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = fn(h, w, targets)
    upstream = torch.randn(lp.shape, generator=torch.Generator().manual_seed(3)).to(lp.dtype)
    (lp * upstream).sum().backward()  # per-token weights, as the RL losses have
    return lp.detach(), ent.detach(), h.grad, w.grad, _producer(lp)


def _producer(lp):
    """The autograd node under the (N, T) view: the custom function's, or the chunks' cat."""
    return type(lp.grad_fn.next_functions[0][0]).__name__


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_linear_head_function_matches_plain_autograd_in_fp32(temperature):
    """LinearHeadStats (the linear heads' chunked path, head_stats.py): log-probs, entropies and
    the gradients w.r.t. the hidden states and the head weight equal the full-logits path's to
    1e-6, for chunks that do and do not divide T = 13 (and N*T = 26)."""
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(2, 13, 64, generator=g), torch.randn(1000, 64, generator=g) * 0.3
    targets = torch.randint(0, 1000, (2, 13), generator=g)
    ref = _stats_and_grads(lambda h, w, y: _plain_stats(h, w, y, temperature, torch.float32), hidden, weight, targets)
    assert ref[3].abs().max() > 0.1 and ref[2].abs().max() > 0.1  # gradients worth comparing
    exact = _stats_and_grads(lambda h, w, y: _plain_stats(h, w, y, temperature, torch.float64),
                             hidden.double(), weight.double(), targets)  # fp64 throughout
    head = linear_head(torch.float32)
    for chunk in (3, 4, 5, 13, 25, 26):
        got = _stats_and_grads(lambda h, w, y: chunked_token_stats(h, w, head, y, temperature, chunk),
                               hidden, weight, targets)
        assert "LinearHeadStats" in got[4]  # the custom function ran, not the checkpoint path
        for name, x, y, z in zip(("logp", "entropy", "d hidden", "d weight"), got[:4], ref[:4], exact[:4]):
            # Values to 1e-6. A gradient entry sums 1,000 vocabulary terms that nearly cancel, and a
            # 3-row chunk's matmul sums them in another order than the 26-row one: 1e-6 of the
            # largest entry (x2: the plain path is itself 6.6e-7 off fp64 here), not of each entry.
            tol = dict(atol=1e-6, rtol=1e-6) if name in ("logp", "entropy") else dict(atol=2e-6 * y.abs().max().item(), rtol=0)
            torch.testing.assert_close(x, y, **tol, msg=lambda m, n=name: f"{n}, chunk {chunk}: {m}")
            # and about as close to fp64 as the plain fp32 path is (a wrong term would be ~0.1 off)
            assert (x.double() - z).abs().max() <= 4 * (y.double() - z).abs().max() + 2**-21 * z.abs().max(), name


def test_linear_head_function_bf16_body_fp32_head():
    """A bf16 body under the fp32 head: the matmul in fp32, the gradients cast back to bf16.
    Against the full path in the same dtypes, to bf16 rounding; the weight gradient is summed over
    chunks in fp32 here (autograd sums per-chunk bf16 ones), so it is at least as close."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(3, 11, 64, generator=g).bfloat16()
    weight = (torch.randn(500, 64, generator=g) * 0.3).bfloat16()
    targets = torch.randint(0, 500, (3, 11), generator=g)
    ref = _stats_and_grads(lambda h, w, y: _plain_stats(h, w, y, 1.0, torch.float32), hidden, weight, targets)
    head = linear_head(torch.float32)
    for chunk in (4, 10, 33):
        got = _stats_and_grads(lambda h, w, y: chunked_token_stats(h, w, head, y, 1.0, chunk), hidden, weight, targets)
        assert got[2].dtype == got[3].dtype == torch.bfloat16
        torch.testing.assert_close(got[0], ref[0], atol=1e-6, rtol=1e-6)  # fp32 values: the same matmul
        torch.testing.assert_close(got[1], ref[1], atol=1e-6, rtol=1e-6)
        for x, y in zip(got[2:4], ref[2:4]):
            torch.testing.assert_close(x.float(), y.float(), atol=2 ** -8 * y.abs().max().item(), rtol=2 ** -7)


def test_linear_head_function_model_dtype_and_frozen_weight():
    """linear_head(None) multiplies in the weight's dtype; a frozen weight gets no gradient and the
    hidden states still get theirs. A head function not made by ``linear_head`` takes the checkpoint path."""
    g = torch.Generator().manual_seed(2)
    hidden, weight = torch.randn(1, 9, 16, generator=g), torch.randn(40, 16, generator=g)
    targets = torch.randint(0, 40, (1, 9), generator=g)
    ref_lp, _ = _plain_stats(hidden, weight, targets, 1.0, None)
    h = hidden.clone().requires_grad_()
    lp, _ = chunked_token_stats(h, weight, linear_head(None), targets, 1.0, 4)
    lp.sum().backward()
    torch.testing.assert_close(lp.detach(), ref_lp, atol=1e-6, rtol=1e-6)
    h_ref = hidden.clone().requires_grad_()
    _plain_stats(h_ref, weight, targets, 1.0, None)[0].sum().backward()
    torch.testing.assert_close(h.grad, h_ref.grad, atol=1e-6, rtol=1e-6)
    other = lambda x, w: torch.nn.functional.linear(x, w)  # noqa: E731 -- not a linear_head
    lp2, _ = chunked_token_stats(hidden.clone().requires_grad_(), weight, other, targets, 1.0, 4)
    assert _producer(lp2) == "CatBackward0"
    torch.testing.assert_close(lp2.detach(), ref_lp, atol=1e-6, rtol=1e-6)
