"""Llama-4's text MoE through ``model=hf``: a small random ``Llama4ForCausalLM`` (tests/moe_dirs.py,
hidden 64, 2 layers of 4 experts, top-1, a shared expert) whose router differs from the top-k
routers of tests/test_hf_moe.py where scalerl reads it: ``Llama4Router`` returns a dense (n, E)
matrix of scores (the sigmoid of each token's top logit, 0 elsewhere) and its logits, not top-k lists.

- the hooks record each position's expert, and ``routing=replay`` rebuilds the scores from the
  recorded experts: at equal weights the generator's log-probs to rounding; one changed expert at the
  last layer changes exactly one token's log-prob; the gate gets its gradient at the replayed
  experts alone (independent sigmoids: exactly 0 elsewhere);
- its checkpoint holds the experts as the model does: pushed and read unit by unit in its own names;
  its body is found although transformers' ``get_decoder`` returns the whole causal LM (``policy.decoder``);
- compute counts the shared expert in full and 1 of the 4 routed experts, and an interleaved layout's
  dense layers in full;
- one run through the entry point replays, logs the routing metrics and trains.
"""
from __future__ import annotations

import json
from functools import partial

import pytest
import torch
from helpers import ANSWERS_ONLY, read_rows, run_cli
from moe_dirs import LLAMA4, active_params_by_hand, assert_routed_as_recorded, build_moe_dir, shape

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
E = shape(LLAMA4)["experts"]


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    """The checkpoint, loaded, and one sampled batch (2 prompts x 3 samples of 10 tokens)."""
    path = build_moe_dir(LLAMA4, tmp_path_factory.mktemp("llama4") / LLAMA4)
    model, tok = load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))
    prompts = [[tok.bos_token_id, 5, 6, 7, 8], [tok.bos_token_id, 9, 10]]
    params = SamplingParams(max_new_tokens=10, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, n=G)
    out = TorchGenerator(Policy(model, gen_head=FP32, train_head=FP32), torch.device("cpu")).generate(prompts, params)
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    return path, model, tok, out, ids, mask


def trainer_logp(llama4, experts=None, route=REPLAY):
    _, model, _, out, ids, mask = llama4
    trainer = CompletionLogits(model, FP32)
    trainer.route = route
    prompt_experts, completion = experts or (out.prompt_experts[::G], out.experts)
    logp, _ = trainer(ids, mask, out.tokens, out.present.long(), G, temperature=1.0,
                      experts=(prompt_experts, completion))
    return logp, trainer


# ------------------------------------------------------------------ record and replay


def test_the_hooks_record_each_positions_top1_expert(llama4):
    """The router's output has no expert lists: the hook takes its logits' top-1, the expert whose
    score the block runs (the one nonzero score of the position)."""
    _, model, tok, out, ids, mask = llama4
    hooks = RouterHooks.of(model)
    assert hooks.layers == 2 and hooks.top_k == 1
    assert out.experts.shape[2:] == (2, 1) and out.prompt_experts.shape[2:] == (2, 1)
    with torch.no_grad():
        scores, _ = hooks.routers[0](torch.randn(5, shape(LLAMA4)["hidden"]))
    assert torch.equal(hooks.seen[0][:, 0], scores.nonzero()[:, 1])
    hooks.seen[0] = None
    fed = out.experts[out.experts[..., 0, 0] >= 0]
    assert ((fed >= 0) & (fed < E)).all()


def test_replay_at_equal_weights_reproduces_the_generators_logprobs(llama4):
    _, model, tok, out, ids, mask = llama4
    logp, trainer = trainer_logp(llama4)
    assert (logp - out.logprobs)[out.sampled].abs().max() < 1e-5
    assert_routed_as_recorded(trainer.routed[1], out.experts)


def test_one_changed_expert_at_the_last_layer_changes_exactly_that_tokens_logprob(llama4):
    """Token t is fed at position t, which predicts token t+1; at the last layer nothing later reads
    position t's output (tests/test_routing.py says why), so another expert there moves that one log-prob."""
    _, model, tok, out, ids, mask = llama4
    base, _ = trainer_logp(llama4)
    row, t = 0, 2
    assert out.present[row, t + 1]
    experts = out.experts.clone()
    experts[row, t, -1, 0] = (int(experts[row, t, -1, 0]) + 1) % E
    changed, _ = trainer_logp(llama4, experts=(out.prompt_experts[::G], experts))
    diff = (changed - base).abs() * out.present
    assert diff[row, t + 1] > 1e-4
    diff[row, t + 1] = 0
    assert diff.max() < 1e-6


def test_the_gate_is_trained_under_replay(llama4):
    """Every token through expert 0 at every layer: its weight is sigmoid(logit 0) alone (Llama-4 never
    renormalises), so each router's gradient is nonzero on its row 0 and exactly 0 on the 3 others.
    Routed on its own, the rows of every expert some token picked get a gradient."""
    _, model, tok, out, ids, mask = llama4
    forced = (torch.zeros_like(out.prompt_experts[::G]), torch.zeros_like(out.experts))
    model.zero_grad(set_to_none=True)
    logp, trainer = trainer_logp(llama4, experts=forced)
    (logp * out.sampled).sum().backward()
    for router in trainer.routers.routers:
        g = router.weight.grad.abs().sum(-1)  # (E,)
        assert g[0] > 0 and (g[1:] == 0).all(), g
    model.zero_grad(set_to_none=True)
    logp, trainer = trainer_logp(llama4, route=None)
    (logp * out.sampled).sum().backward()
    assert (trainer.routers.routers[0].weight.grad.abs().sum(-1) > 0).sum() >= 2
    model.zero_grad(set_to_none=True)


def test_the_checkpoint_is_read_unit_by_unit_in_its_own_names(llama4):
    """Llama-4 saves its experts as its model holds them, one (E, ...) ``gate_up_proj`` and ``down_proj``
    per layer: a push needs no name conversion (``checkpoint_format``), and a sharded start-up fills a
    meta-built model unit by unit from the file (``CheckpointUnits``), not from a whole copy."""
    from scalerl.models.load import CheckpointUnits, build_empty, checkpoint_format

    path, model, *_ = llama4
    assert checkpoint_format(path) is None
    empty = build_empty(path, dtype=torch.float32)
    units = CheckpointUnits(path, empty, dtype=torch.float32, device=torch.device("cpu"))
    assert units.files is not None
    units.materialize(empty)
    got, ref = empty.state_dict(), model.state_dict()
    assert got.keys() == ref.keys() and any(t.dim() == 3 for t in ref.values())
    assert all(torch.equal(got[k], ref[k]) for k in ref)


# ------------------------------------------------------------------ compute


def test_compute_counts_the_shared_expert_and_one_routed_expert(llama4):
    _, model, tok, *_ = llama4
    assert inactive_expert_params(model) == 2 * 3 * 12_288  # 2 layers x 3 idle experts of 4 x 3 x 64 x 64
    assert flop_params(model) == active_params_by_hand(LLAMA4, len(tok))


def test_an_interleaved_layout_counts_its_dense_layers_in_full():
    """``interleave_moe_layer_step=2`` (built in place, nothing saved): layer 0 is a dense MLP of
    ``intermediate_size_mlp`` 128 (3 x 64 x 128 = 24,576), layer 1 has the experts (1 of 4 routed,
    12,288, the shared one, 12,288, the router, 256); both 16,384 attention and 128 norms; then 64 + 99 x 64.
    The hooks see one router, so the routing metrics' layer i is the i-th layer with experts."""
    import transformers

    config = transformers.Llama4TextConfig(vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                           num_key_value_heads=2, head_dim=32, num_local_experts=4,
                                           num_experts_per_tok=1, intermediate_size=64, intermediate_size_mlp=128,
                                           interleave_moe_layer_step=2, tie_word_embeddings=False)
    model = transformers.Llama4ForCausalLM(config)
    attention_norms = 16_384 + 128
    assert config.moe_layers == [1]
    assert flop_params(model) == 2 * attention_norms + 24_576 + 2 * 12_288 + 256 + 64 + 99 * 64
    assert RouterHooks.of(model).layers == 1


# ------------------------------------------------------------------ through the entry point


@pytest.mark.slow
def test_a_replayed_run_logs_the_routing_and_trains(llama4, tmp_path):
    """``routing=replay`` (so no activation checkpointing) from a warm start to a 10% pass rate on
    2-digit additions: every step replays the generator's experts (no pair differs), logs each layer's
    expert load (E / k = 4 at most), trains on groups whose rewards differ, and counts the active
    parameters by hand in ``derived.json``."""
    path = llama4[0]
    steps = 3
    run_cli(["model=hf", f"model.path={path}", "model.warmstart.enabled=true", "model.warmstart.target_pass_rate=0.1",
             "model.activation_checkpointing=false", "routing=replay", "logger=none", "train.threads=1", "async=sync",
             *ANSWERS_ONLY, "task.mix.add3=0", "task.mix.mul2=0", "+task.mix.add2=1.0", "task.n_train=4096",
             "task.n_heldout=64", "batch.prompts=8", "batch.generations=8", "batch.minibatches=2",
             "train.eval_samples=1", "precision.generator_body=auto", f"train.steps={steps}", "train.eval_every=100",
             f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    rows = read_rows(tmp_path / "run" / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert sum(r["effective_batch"] for r in rows) > 0
    for r in rows:
        assert all(1.0 <= r[f"routing_load_l{i}"] <= E for i in range(2))
    trained = [r for r in rows if r["effective_batch"] > 0]
    assert all(r["routing_pairs"] > 0 and r["routing_disagree"] == 0 for r in trained)
    assert all(r["mismatch_kl"] < 1e-9 for r in trained)  # the same weights and experts: rounding at most
    vocab = json.loads((tmp_path / "run" / "final_policy" / "config.json").read_text())["vocab_size"]
    derived = json.loads((tmp_path / "run" / "derived.json").read_text())
    assert derived["n_params"] == active_params_by_hand(LLAMA4, vocab)
