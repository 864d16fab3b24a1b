"""The embedded MoE and the ``routing`` axis (docs/mismatch.md, docs/outputs.md).

A tiny Qwen3-MoE (``model=tiny_moe``'s architecture, smaller) is built offline; the torch engine
records each token's experts at every layer, and the trainer's forward replays them
(``routing=replay``, R3) or routes itself (``routing=none``).
"""
from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import cli, run_cli  # cli: the entry point forked from a server that imported it (helpers.ForkedCli)
from moe_dirs import assert_routed_as_recorded

from scalerl.generation.engines import SamplingParams, TorchGenerator, left_pad
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import CompletionLogits, Policy
from scalerl.models.tiny_moe import build_tiny_moe_checkpoint
from scalerl.precision.base import linear_head
from scalerl.routing import ROUTINGS
from scalerl.train.compute import flop_params

REPLAY = partial(ROUTINGS["replay"].fn, cfg=ROUTINGS["replay"].schema(name="replay"))
FP32 = linear_head(torch.float32)
G = 3


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """model=tiny_moe's shape (hidden 96, 3 layers of 8 experts of width 96, top-2) and one sampled batch."""
    path = build_tiny_moe_checkpoint(tmp_path_factory.mktemp("moe"), hidden_size=96, num_layers=3, num_heads=3,
                                     num_experts=8, experts_per_token=2, moe_intermediate_size=96,
                                     max_position_embeddings=64, seed=0)
    model, tok = load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))
    prompts = [[tok.bos_token_id, 5, 6, 7, 8], [tok.bos_token_id, 9, 10]]
    params = SamplingParams(max_new_tokens=10, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=G)
    gen = TorchGenerator(Policy(model, gen_head=FP32, train_head=FP32), torch.device("cpu"))
    out = gen.generate(prompts, params)
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    return model, tok, out, ids, mask


def trainer_logp(model, out, ids, mask, experts=None, route=None):
    trainer = CompletionLogits(model, FP32)
    trainer.route = route
    prompt_experts = out.prompt_experts[::G] if experts is None else experts[0]
    logp, _ = trainer(ids, mask, out.tokens, out.present.long(), G, temperature=1.0,
                      experts=(prompt_experts, out.experts if experts is None else experts[1]))
    return logp, trainer


def test_the_generator_records_every_fed_token_at_every_layer(moe):
    model, tok, out, ids, mask = moe
    n, t = out.tokens.shape
    assert out.experts.shape == (n, t, 3, 2) and out.prompt_experts.shape == (n, ids.shape[1], 3, 2)
    # A row's last present token is never fed (nothing reads its hidden state): -1 there, experts before it.
    last = out.present.sum(-1) - 1
    for r in range(n):
        assert (out.experts[r, : last[r]] >= 0).all() and (out.experts[r, last[r]:] == -1).all()
    # The prompt's padding has none; the second prompt is 2 tokens shorter.
    assert (out.prompt_experts[G:, :2] == -1).all() and (out.prompt_experts[G:, 2:] >= 0).all()
    # Two distinct experts per token and layer.
    fed = out.experts[out.experts[..., 0] >= 0]
    assert (fed[..., 0] != fed[..., 1]).all()


def test_replay_at_equal_weights_reproduces_the_generators_logprobs(moe):
    model, tok, out, ids, mask = moe
    logp, trainer = trainer_logp(model, out, ids, mask, route=REPLAY)
    assert (logp - out.logprobs)[out.sampled].abs().max() < 1e-5
    # ...and it routed exactly as the generator did, wherever the generator recorded a position
    assert_routed_as_recorded(trainer.routed[1], out.experts)


def test_one_changed_expert_at_the_last_layer_changes_exactly_that_tokens_logprob(moe):
    """Token t is fed at position t, which predicts token t+1. At the last layer nothing later reads
    position t's output (no later layer attends to it; later positions attend only to keys and values
    computed at earlier layers), so replacing one of its experts there changes the log-prob of token
    t+1 alone. At an earlier layer it would also reach every later position through attention."""
    model, tok, out, ids, mask = moe
    base, _ = trainer_logp(model, out, ids, mask, route=REPLAY)
    row, t = 0, 2
    assert out.present[row, t + 1]
    experts = out.experts.clone()
    old = experts[row, t, -1].tolist()
    experts[row, t, -1, 0] = next(e for e in range(8) if e not in old)  # an expert it did not use
    changed, _ = trainer_logp(model, out, ids, mask, experts=(out.prompt_experts[::G], experts), route=REPLAY)
    diff = (changed - base).abs() * out.present
    assert diff[row, t + 1] > 1e-4
    diff[row, t + 1] = 0
    assert diff.max() < 1e-6  # the others: float rounding of the experts' regrouped matmuls at most


def test_the_gate_is_trained_under_replay(moe):
    """Replay every token through experts 0 and 1 at every layer. With ``norm_topk_prob`` their weights
    are p0 / (p0 + p1) and p1 / (p0 + p1) = softmax over the two logits alone, so the gate's gradient is
    nonzero on its rows 0 and 1 and zero on the 6 others, up to the rounding of the full softmax's
    backward (the router's own choice would spread it over every expert some token picked)."""
    model, tok, out, ids, mask = moe
    forced = torch.zeros_like(out.experts)
    forced[..., 1] = 1
    prompt = torch.zeros_like(out.prompt_experts[::G])
    prompt[..., 1] = 1
    model.zero_grad(set_to_none=True)
    logp, trainer = trainer_logp(model, out, ids, mask, experts=(prompt, forced), route=REPLAY)
    (logp * out.sampled).sum().backward()
    for router in trainer.routers.routers:
        g = router.weight.grad.abs().sum(-1)  # (E,)
        assert (g[:2] > 0).all() and (g[2:] < 1e-4 * g[:2].min()).all(), g
    model.zero_grad(set_to_none=True)
    logp, trainer = trainer_logp(model, out, ids, mask, route=None)  # own routing: other experts' rows too
    (logp * out.sampled).sum().backward()
    g = trainer.routers.routers[0].weight.grad.abs().sum(-1)
    assert (g[2:] > 1e-2 * g[:2].min()).any()
    model.zero_grad(set_to_none=True)


def test_compute_counts_an_moes_active_parameters(moe):
    """Per layer: attention 4 x 96 x 96 = 36,864, q/k norms 2 x 32, two RMSNorms 2 x 96, the router
    8 x 96 = 768, and 2 of the 8 experts, each 3 x 96 x 96 = 27,648 (gate, up, down); then the final
    norm and the head (vocabulary x 96). The input embedding is a lookup: not counted."""
    model, tok, *_ = moe
    vocab = model.get_output_embeddings().weight.shape[0]
    layer = 36_864 + 64 + 192 + 768 + 2 * 27_648
    assert flop_params(model) == 3 * layer + 96 + vocab * 96
    # tiny's dense layer: 36,864 + 3 x 96 x 192 + 192 = 92,352: equal active compute within 1%
    assert abs(layer / 92_352 - 1) < 0.01


def test_replay_on_a_dense_model_is_refused_at_dry_run(tmp_path):
    proc = cli(["--dry-run", "logger=none", "routing=replay"], tmp_path, check=False)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "routing" in line]
    assert proc.returncode == 2 and len(lines) == 1 and "dense" in lines[0], proc.stdout + proc.stderr
    ok = cli(["--dry-run", "logger=none", "routing=replay", "model=tiny_moe"], tmp_path, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.slow
def test_routing_metrics_in_every_steps_row_through_the_entry_point(tmp_path):
    """The default bf16-weighted generator (precision.generator_body=engine) against the fp32 trainer,
    at staleness 0 (async=sync): some token-layer pairs are routed otherwise with ``routing=none``, none
    with ``replay``, whose mismatch KL is then that of the agreeing tokens."""
    from helpers import read_rows

    common = ["logger=none", "model=tiny_moe", "model.warmstart.enabled=false", "async=sync", "filter=none",
              "train.steps=1", "train.eval_every=100", "task.n_heldout=8", "batch.prompts=4", "batch.generations=4",
              "batch.minibatches=1", "length.max_new_tokens=24"]
    rows = {}
    for routing in ("none", "replay"):
        run_cli([f"routing={routing}", *common], tmp_path)  # first: the run directory's name starts with it
        (path,) = (tmp_path / "runs").glob(f"routing={routing},*/steps.jsonl")
        (rows[routing],) = read_rows(path)
    none, replay = rows["none"], rows["replay"]
    for row in (none, replay):
        assert row["routing_pairs"] > 100 and row["routing_pairs_stale"] == 0
        assert all(1.0 <= row[f"routing_load_l{i}"] <= 4.0 for i in range(3))  # E / k = 4 at most
    assert none["routing_disagree"] > 0 and none["mismatch_tokens_route_differ"] > 0
    assert none["mismatch_kl_route_differ"] > none["mismatch_kl_route_agree"]
    assert replay["routing_disagree"] == 0 and replay["mismatch_tokens_route_differ"] == 0
    assert "mismatch_kl_route_differ" not in replay
    assert replay["mismatch_kl"] == replay["mismatch_kl_route_agree"]


@pytest.mark.slow
def test_replay_through_generator_processes(tmp_path):
    """async=pipeline_rl: the generator process records the experts and sends them with each rollout
    (the transport carries every ``Generation`` field); the trainer replays them in π_old's forward
    (``correction=icepop``) and in π_θ's, so no pair differs, at staleness 0 or across it. The
    generator starts step 2's batch before step 1's update is pushed, so some rows are stale, and
    π_old's forward must count them as such (it once counted every row as of staleness 0)."""
    from helpers import read_rows

    run_cli(["routing=replay", "correction=icepop", "logger=none", "model=tiny_moe", "model.warmstart.enabled=false", "async=pipeline_rl",
             "filter=none", "train.steps=2", "train.eval_every=100", "task.n_heldout=8", "batch.prompts=4",
             "batch.generations=4", "batch.minibatches=1", "length.max_new_tokens=24"], tmp_path)
    (path,) = (tmp_path / "runs").glob("routing=replay,*/steps.jsonl")
    rows = read_rows(path)
    assert len(rows) == 2 and all("routing_load_l0" in r for r in rows)
    pairs = sum(r.get("routing_pairs", 0) + r.get("routing_pairs_stale", 0) for r in rows)
    assert pairs > 100 and sum(r.get("routing_pairs_stale", 0) for r in rows) > 0
    assert all(r.get(k, 0.0) == 0.0 for r in rows for k in ("routing_disagree", "routing_disagree_stale"))


@pytest.mark.parametrize("override,key", [("generation=vllm", "routing"),
                                          ("model.activation_checkpointing=true", "model.activation_checkpointing")])
def test_replay_refuses_what_it_cannot_replay(override, key):
    """vLLM's recorded experts are not read yet; a checkpointed layer's recompute would route afresh."""
    from scalerl.config import ConfigError, compose, validate

    with pytest.raises(ConfigError) as err:
        validate(compose(["routing=replay", "model=tiny_moe", "async=sync", override]))
    assert err.value.key == key


def test_routing_none_keeps_the_run_hashes_of_before_the_axis():
    """``routing=none`` computes what every run computed before the axis existed, so it stays out of the
    hash and finished runs still count as finished; ``replay`` is in it."""
    from scalerl.config import compose
    from scalerl.launch.rundir import config_hash, hashable

    assert "routing" not in hashable(compose([])) and "routing" not in hashable(compose(["model=tiny_moe"]))
    assert config_hash(compose(["model=tiny_moe", "routing=replay"])) != config_hash(compose(["model=tiny_moe"]))
