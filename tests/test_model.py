"""Tokenizer and model round trips, log-probs against F.cross_entropy, and the
sampler's behaviour log-probs against the trainer's recomputation."""
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy, token_entropy, token_logprobs
from scalerl.models.tiny import build_tiny_checkpoint
from scalerl.models.tokenizer import build_char_tokenizer
from scalerl.precision.base import linear_head
from scalerl.tasks.rewards import answer_part


def _tiny(tmp_path):
    return build_tiny_checkpoint(tmp_path / "m", hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                 max_position_embeddings=128, seed=0)


def test_char_tokenizer_round_trip(tmp_path):
    tok = build_char_tokenizer()
    text = "042+517=0559 Okay, time is up. </think>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tok.unk_token_id not in ids
    assert tok.decode(ids) == text
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(text, add_special_tokens=False)["input_ids"] == ids
    assert (again.eos_token_id, again.pad_token_id, again.bos_token_id) == (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id)


def test_model_round_trip_through_save_and_from_pretrained(tmp_path):
    path = _tiny(tmp_path)
    assert (path / "model.safetensors").exists() and (path / "config.json").exists()
    m1 = AutoModelForCausalLM.from_pretrained(path)
    m2, tok = load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))
    ids = torch.tensor([tok("12+34=", add_special_tokens=False)["input_ids"]])
    assert torch.equal(m1(ids).logits, m2(ids).logits)
    m2.save_pretrained(tmp_path / "copy")
    m3 = AutoModelForCausalLM.from_pretrained(tmp_path / "copy")
    assert torch.equal(m2(ids).logits, m3(ids).logits)


def test_token_logprobs_match_cross_entropy():
    torch.manual_seed(0)
    logits, targets = torch.randn(3, 5, 11), torch.randint(0, 11, (3, 5))
    ce = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), reduction="none").view(3, 5)
    assert torch.allclose(token_logprobs(logits, targets), -ce, atol=1e-6)
    p = torch.softmax(logits, -1)
    assert torch.allclose(token_entropy(logits), -(p * p.log()).sum(-1), atol=1e-6)


def test_sampler_logprobs_equal_trainer_logprobs(tmp_path):
    model, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float32, device=torch.device("cpu"))
    pol = Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32))
    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=", "123+456=")]
    g = TorchGenerator(pol, torch.device("cpu")).generate(
        prompts, SamplingParams(max_new_tokens=6, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    from scalerl.generation.engines.torch_engine import left_pad

    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp = token_logprobs(pol.completion_logits(ids, mask, g.tokens, g.present.long()), g.tokens)
    # Same fp32 math, KV cache vs one full forward: agreement to float rounding (left padding included).
    assert torch.allclose(lp[g.present], g.logprobs[g.present], atol=1e-5)
    assert g.version.eq(0).all()


def test_answer_part_strips_thinking_and_markers():
    assert answer_part("12 Okay, time is up. </think> 0559") == "0559"
    assert answer_part("0559<eos><pad>") == "0559"


def test_shared_prefix_equals_full_forward_values_and_gradients(tmp_path):
    """Groups share one prompt forward (keys/values repeated); must equal a plain forward."""
    model, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float64, device=torch.device("cpu"))
    pol = Policy(model, gen_head=linear_head(torch.float64), train_head=linear_head(torch.float64))
    from scalerl.generation.engines.torch_engine import left_pad

    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=", "123+456=")]
    g = TorchGenerator(pol, torch.device("cpu")).generate(
        prompts, SamplingParams(max_new_tokens=5, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=3,
                                seeds=torch.tensor([11, 12])))
    assert g.tokens.shape[0] == 6
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")

    def loss_of(logits):
        return token_logprobs(logits, g.tokens)[g.present].sum()

    shared = pol.completion_logits(ids, mask, g.tokens, g.present.long(), group=3)
    loss_of(shared).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    rep_ids, rep_mask = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)
    full_ids = torch.cat([rep_ids, g.tokens], 1)
    full_mask = torch.cat([rep_mask, g.present.long()], 1)
    from scalerl.models.policy import positions_from_mask

    h, _ = pol.hidden(full_ids, full_mask, positions_from_mask(full_mask))
    full = pol.logits(h[:, ids.shape[1] - 1 : -1], side="train")
    loss_of(full).backward()
    assert torch.allclose(shared[g.present], full[g.present], atol=1e-10)
    # Gradients flow through the shared keys/values into the prompt computation. (HF's RMSNorm
    # and RoPE compute in fp32 even in an fp64 model, so the two association orders agree to
    # fp32 rounding; a missing gradient path would be off by tens of percent.)
    for (name, p), a in zip(model.named_parameters(), grads):
        assert (a - p.grad).abs().max() <= 1e-5 * a.abs().max(), name
    # ...and the sampler's behaviour log-probs (computed with the shared prefill) agree too.
    lp = token_logprobs(shared.detach(), g.tokens)
    assert torch.allclose(lp[g.present], g.logprobs[g.present], atol=1e-5)


@pytest.mark.parametrize("width", [1, 2])
def test_trainer_logits_for_the_narrowest_completions(tmp_path, width):
    """The trainer feeds a completion's tokens but its last (nothing reads that position), and
    still runs the pass for a 1-token completion (FSDP2 ranks must run the same layer forwards).
    Both widths against a plain forward of prompt+completion."""
    from scalerl.generation.engines.torch_engine import left_pad
    from scalerl.models.policy import positions_from_mask

    model, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float64, device=torch.device("cpu"))
    pol = Policy(model, gen_head=linear_head(torch.float64), train_head=linear_head(torch.float64))
    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=", "123+456=")]
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    tokens = torch.tensor([[5, 6], [7, 8]])[:, :width]
    present = torch.tensor([[1, 1], [1, 0]])[:, :width]
    got = pol.completion_logits(ids, mask, tokens, present)
    assert got.shape == (2, width, model.config.vocab_size)
    full_mask = torch.cat([mask, present], 1)
    h, _ = pol.hidden(torch.cat([ids, tokens], 1), full_mask, positions_from_mask(full_mask))
    want = pol.logits(h[:, ids.shape[1] - 1 : -1], side="train")
    assert torch.allclose(got[present.bool()], want[present.bool()], atol=1e-10)


def test_inverse_cdf_sampling_matches_the_categorical_distribution():
    from scalerl.generation.engines.noise import row_keys, sample_inverse_cdf, uniforms

    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    u = uniforms(row_keys(torch.arange(200_000), 1), 1)[:, 0]
    draws = sample_inverse_cdf(p.log().expand(200_000, 4), u)
    freq = torch.bincount(draws, minlength=4).float() / draws.numel()
    assert torch.allclose(freq, p, atol=0.005)  # 4+ sigma for 200k draws
    assert 0.49 < u.mean() < 0.51 and u.min() >= 0 and u.max() < 1
    # Hand-checked: CDF [0.5, 0.8, 0.95, 1.0] (each fp32-rounded), so these u land in tokens 0, 0, 2, 3, 3.
    edges = sample_inverse_cdf(p.log().expand(5, 4), torch.tensor([0.0, 0.4999, 0.81, 0.96, 0.999999], dtype=torch.float64))
    assert edges.tolist() == [0, 0, 2, 3, 3]


def test_mix64_is_splitmix64_with_wrapping_int64():
    from scalerl.generation.engines.noise import mix64

    def ref(x: int) -> int:  # SplitMix64's finaliser on unsigned 64-bit integers
        m = (1 << 64) - 1
        x &= m
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)

    xs = [0, 1, 2, 12345678901234, -5, (1 << 63) - 1, -(1 << 63)]
    assert [v & ((1 << 64) - 1) for v in mix64(torch.tensor(xs)).tolist()] == [ref(x) for x in xs]


def test_a_completion_depends_on_its_prompt_seed_not_its_batch(tmp_path):
    """What makes N ranks reproduce 1 rank: prompt b sampled alone or inside a batch, same tokens."""
    model, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float32, device=torch.device("cpu"))
    gen = TorchGenerator(Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32)),
                         torch.device("cpu"))
    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=", "123+456=", "7*8=")]

    def params(seeds):
        return SamplingParams(max_new_tokens=6, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=4,
                              seeds=torch.tensor(seeds))

    batch = gen.generate(prompts, params([101, 202, 303]))
    alone = gen.generate(prompts[1:2], params([202]))
    w = alone.tokens.shape[1]
    assert torch.equal(batch.tokens[4:8, :w], alone.tokens) and not batch.present[4:8, w:].any()
    assert torch.allclose(batch.logprobs[4:8, :w], alone.logprobs, atol=1e-6)
    assert not torch.equal(batch.tokens[0:4], batch.tokens[4:8])  # different seeds, different samples
    other = gen.generate(prompts[1:2], params([203]))
    assert not torch.equal(other.tokens, alone.tokens)


def test_sampling_uses_the_requested_temperature(tmp_path):
    """SamplingParams.temperature is what the generator samples at (it was ignored)."""
    model, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float32, device=torch.device("cpu"))
    pol = Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32))
    prompts = [[tok.bos_token_id] + tok("12+34=", add_special_tokens=False)["input_ids"]]
    from scalerl.generation.engines.torch_engine import left_pad

    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    for temp in (0.5, 2.0):
        g = TorchGenerator(pol, torch.device("cpu")).generate(prompts, SamplingParams(
            max_new_tokens=6, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=8, temperature=temp))
        with torch.no_grad():
            logits = pol.completion_logits(ids, mask, g.tokens, g.present.long(), group=8) / temp
        lp = token_logprobs(logits, g.tokens)
        assert torch.allclose(lp[g.present], g.logprobs[g.present], atol=1e-5), temp


@pytest.mark.parametrize("tied", [False, True])
def test_meta_build_filled_unit_by_unit_equals_a_full_load(tmp_path, tied):
    """``build_empty`` + ``CheckpointUnits`` (the sharded start-up, without the sharding): the same
    weights as ``load_checkpoint``, a layer at a time, tied weights kept one tensor, buffers real."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from scalerl.models.load import CheckpointUnits, build_empty

    path = _tiny(tmp_path)
    if tied:
        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
        path = tmp_path / "qwen"
        Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)  # bf16 on disk, like real checkpoints
    want = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = build_empty(path, dtype=torch.float32)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert all(b.device.type == "cpu" for b in model.buffers())
    units = CheckpointUnits(path, model, dtype=torch.float32, device=torch.device("cpu"))
    first = model.model.layers[0]
    assert units.materialize(first) == len(list(first.parameters()))
    assert model.model.layers[1].self_attn.q_proj.weight.device.type == "meta"  # one unit at a time
    units.materialize(model)
    got, ref = model.state_dict(), want.state_dict()
    assert got.keys() == ref.keys()
    for k in ref:
        assert got[k].dtype == torch.float32 and torch.equal(got[k], ref[k]), k
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    ids = torch.tensor([[1, 5, 7, 9]])
    assert torch.equal(model(ids).logits, want(ids).logits)
