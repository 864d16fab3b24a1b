"""scalerl's Qwen3-MoE module (``scalerl/models/qwen3_moe.py``, ``model=tiny_moe``) against
transformers' ``Qwen3MoeForCausalLM`` (eager, fp32) at the same weights, through the trainer's
forward (``CompletionLogits``): log-probs to float rounding, gradients of a loss to 1e-5 relative
(the router's included); checkpoints moving both ways; the sampler's fast path; the routing hooks
(R3) and the active-parameter count finding the same routers and experts."""
from functools import partial

import pytest
import torch
import transformers

from scalerl.generation.engines.torch_engine import left_pad
from scalerl.models.lean import LeanLlama, lean_supported
from scalerl.models.load import OWN_MODULES, own_module
from scalerl.models.policy import CompletionLogits, positions_from_mask
from scalerl.models.qwen3_moe import Qwen3MoeConfig, Qwen3MoeForCausalLM
from scalerl.models.routing import RouterHooks
from scalerl.precision.base import linear_head
from scalerl.routing import ROUTINGS
from scalerl.train.compute import inactive_expert_params

V = 40
REPLAY = partial(ROUTINGS["replay"].fn, cfg=ROUTINGS["replay"].schema(name="replay"))


def _hf(norm_topk=True) -> transformers.Qwen3MoeForCausalLM:
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(vocab_size=V, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                                      num_experts=4, num_experts_per_tok=2, norm_topk_prob=norm_topk,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=64, pad_token_id=0, tie_word_embeddings=False,
                                      output_router_logits=False, attn_implementation="eager")
    model = transformers.Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so a wrong norm weight shows; routers that pick apart
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
    return model


def _own_copy(hf, tmp_path) -> Qwen3MoeForCausalLM:
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    assert own_module(tmp_path / "hf") is Qwen3MoeForCausalLM
    return Qwen3MoeForCausalLM.from_pretrained(tmp_path / "hf")


def _batch(group=3):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (4, 7, 2)]
    p_ids, p_mask = left_pad(prompts, 0, "cpu")
    n = len(prompts) * group
    lengths = torch.randint(1, 9, (n,), generator=g)
    tokens = torch.randint(3, V, (n, 8), generator=g)
    t_mask = (torch.arange(8)[None] < lengths[:, None]).long()
    return p_ids, p_mask, tokens * t_mask, t_mask, group


def _logp_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    p_ids, p_mask, tokens, t_mask, group = batch
    logp, _ = CompletionLogits(model, linear_head(torch.float32))(p_ids, p_mask, tokens, t_mask, group, temperature=0.7)
    weights = torch.linspace(-1, 2, tokens.numel()).view(tokens.shape)
    (logp * weights * t_mask).sum().backward()
    return logp.detach()[t_mask.bool()], {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _rel(a, b) -> float:
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def _per_expert(grads: dict) -> dict:
    """transformers 5 keeps an experts block as (E, 2I, H) gate_up and (E, H, I) down tensors: per expert, by name."""
    out = {}
    for name, g in grads.items():
        if name.endswith("experts.gate_up_proj"):
            for e, (gate, up) in enumerate(zip(*g.chunk(2, dim=1))):
                out[name.replace("gate_up_proj", f"{e}.gate_proj.weight")] = gate
                out[name.replace("gate_up_proj", f"{e}.up_proj.weight")] = up
        elif name.endswith("experts.down_proj"):
            for e in range(g.shape[0]):
                out[name.replace("down_proj", f"{e}.down_proj.weight")] = g[e]
        else:
            out[name] = g
    return out


@pytest.mark.parametrize("norm_topk", [True, False])
def test_logprobs_and_gradients_match_transformers(tmp_path, norm_topk):
    hf = _hf(norm_topk)
    own = _own_copy(hf, tmp_path)
    batch = _batch()
    lp_hf, g_hf = _logp_and_grads(hf, batch)
    lp_own, g_own = _logp_and_grads(own, batch)
    torch.testing.assert_close(lp_own, lp_hf, rtol=0, atol=2e-6)
    g_hf = _per_expert(g_hf)
    assert g_own.keys() == g_hf.keys() and any(".mlp.gate.weight" in n for n in g_own)   # the router trains
    worst = max(_rel(g_own[n], g_hf[n]) for n in g_hf)
    assert worst < 1e-5, worst


def test_a_checkpoint_moves_both_ways(tmp_path):
    hf = _hf()
    own = _own_copy(hf, tmp_path)
    ids, mask = left_pad([[5, 6, 7, 8], [9, 10]], 0, "cpu")
    pos = positions_from_mask(mask)
    with torch.no_grad():
        for p in own.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    own.save_pretrained(tmp_path / "own")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "own", dtype=torch.float32,
                                                             attn_implementation="eager", local_files_only=True)
    with torch.no_grad():
        a = torch.log_softmax(back(input_ids=ids, attention_mask=mask, position_ids=pos).logits, -1)
        b = torch.log_softmax(own(ids, mask, pos).logits, -1)
        c = torch.log_softmax(hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits, -1)
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=0, atol=2e-6)
    assert (a - c).abs().max() > 1e-3   # the new values, not the old ones


def test_the_sampler_fast_path_runs_on_it_and_records_the_same_experts(tmp_path):
    own = _own_copy(_hf(), tmp_path)
    assert lean_supported(own)
    fast = LeanLlama(own.get_decoder())
    hooks = RouterHooks.of(own)
    assert hooks is not None and hooks.layers == 2 and hooks.top_k == 2
    ids, mask = left_pad([[5, 6, 7, 8], [9, 10]], 0, "cpu")
    pos = positions_from_mask(mask)
    with torch.no_grad():
        h = fast.forward(ids, mask, pos, fast.new_cache(8))
        seen_fast = hooks.take(tuple(ids.shape))
        full = own.get_decoder()(ids, mask, pos).last_hidden_state
        seen_full = hooks.take(tuple(ids.shape))
    torch.testing.assert_close(h[mask.bool()], full[mask.bool()], rtol=0, atol=1e-5)
    assert torch.equal(seen_fast[mask.bool()], seen_full[mask.bool()])
    assert len(torch.unique(seen_full[mask.bool()])) > 2   # the tokens do not all go to the same experts


def test_replayed_experts_change_exactly_that_token(tmp_path):
    own = _own_copy(_hf(), tmp_path)
    hooks = RouterHooks.of(own)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    mask = torch.ones_like(ids)
    pos = positions_from_mask(mask)
    with torch.no_grad():
        base = torch.log_softmax(own(ids, mask, pos).logits, -1)
        recorded = hooks.take(tuple(ids.shape))
        with hooks.replaying(recorded, REPLAY):
            same = torch.log_softmax(own(ids, mask, pos).logits, -1)
        changed = recorded.clone()
        changed[0, 4, 1, 0] = next(e for e in range(4) if e not in changed[0, 4, 1].tolist())  # token 4, layer 1
        with hooks.replaying(changed, REPLAY):
            other = torch.log_softmax(own(ids, mask, pos).logits, -1)
    torch.testing.assert_close(same, base, rtol=0, atol=1e-6)
    assert torch.equal(other[0, :4], same[0, :4]) and not torch.allclose(other[0, 4], same[0, 4])


def test_active_parameters_are_counted_as_for_transformers(tmp_path):
    hf = _hf()
    own = _own_copy(hf, tmp_path)
    per_expert = 3 * 64 * 32
    assert inactive_expert_params(own) == inactive_expert_params(hf) == 2 * (4 - 2) * per_expert


def test_it_refuses_what_it_does_not_compute():
    base = dict(model_type="qwen3_moe", vocab_size=V, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64)
    Qwen3MoeConfig.from_dict(base)
    for key, value in [("mlp_only_layers", [1]), ("decoder_sparse_step", 2), ("use_sliding_window", True),
                       ("attention_bias", True), ("model_type", "llama")]:
        with pytest.raises(ValueError, match=key):
            Qwen3MoeConfig.from_dict({**base, key: value})
    assert set(OWN_MODULES) == {"llama", "qwen3_moe"}


MOE_STEPS = 4
MOE_ARGS = ["model=tiny_moe", "logger=none", "train.threads=1", "async=sync", "batch.prompts=8", "batch.generations=8",
            "batch.minibatches=2", "train.eval_samples=1", f"train.steps={MOE_STEPS}", "train.eval_every=2",
            "train.ckpt_every=2", "precision.generator_body=auto", "train.export_policy=true"]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """One uninterrupted 1-rank run of ``model=tiny_moe`` through the entry point."""
    from helpers import run_cli

    root = tmp_path_factory.mktemp("tiny-moe")
    run_cli([*MOE_ARGS, f"hydra.run.dir={root / 'one'}"], root)
    return root


@pytest.mark.slow
def test_two_fsdp2_ranks_reproduce_one_rank_on_tiny_moe(one_rank):
    """``model=tiny_moe`` on the own module through the entry point: 2 FSDP2 ranks (each layer a unit,
    its experts sharded with it) take the same samples as 1 rank, with losses and weights to rounding
    (tests/test_distributed.py says why the tolerances), and every row carries the routing metrics.
    It hung before every expert got a gradient in every backward (``qwen3_moe.Experts``): the ranks'
    tokens chose different experts, and FSDP2 reduce-scattered different sets of gradients."""
    from helpers import read_rows, torchrun
    from safetensors.torch import load_file

    root = one_rank
    torchrun(MOE_ARGS, root / "two")
    sa, sb = (read_rows(root / d / "steps.jsonl") for d in ("one", "two"))
    assert [r["step"] for r in sa] == [r["step"] for r in sb] == list(range(1, MOE_STEPS + 1))
    for ra, rb in zip(sa, sb):
        same = ("train_reward", "response_length", "effective_batch", "truncation_rate")
        assert {k: ra[k] for k in same} == {k: rb[k] for k in same}, ra["step"]
        assert ra.get("loss") == pytest.approx(rb.get("loss"), rel=1e-4, abs=1e-6), ra["step"]   # None: nothing to train
        assert 1.0 <= ra["routing_load_l0"] <= 4.0 and 1.0 <= rb["routing_load_l0"] <= 4.0   # rank 0's tokens there
    assert sum(r["effective_batch"] > 0 for r in sa) >= 2   # it trained, on more than one step
    wa, wb = (load_file(str(root / d / "final_policy" / "model.safetensors")) for d in ("one", "two"))
    assert wa.keys() == wb.keys() and any(".experts.7." in k for k in wa)   # one tensor per expert, as published
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


@pytest.mark.slow
def test_a_tiny_moe_run_killed_mid_run_resumes_bit_for_bit(one_rank):
    """SIGKILL right after step 3's row (the last checkpoint is step 2's), then the same command: the
    rows (routing metrics included) and the final weights, every expert's, equal the uninterrupted run's."""
    from helpers import VOLATILE, read_rows, run_cli
    from safetensors.torch import load_file

    root = one_rank
    args = [*MOE_ARGS, f"hydra.run.dir={root / 'killed'}"]
    killed = run_cli(args, root, extra_env={"SCALERL_FAILPOINT": "steps.appended@3"}, check=False)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert [r["step"] for r in read_rows(root / "killed" / "steps.jsonl")] == [1, 2, 3]
    again = run_cli(args, root)
    assert "resuming" in again.stdout + again.stderr

    def stable(rows):
        return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]

    for name in ("steps.jsonl", "metrics.jsonl"):
        a, b = (read_rows(root / d / name) for d in ("one", "killed"))
        assert stable(a) == stable(b), name
    assert any("routing_disagree" in r for r in read_rows(root / "killed" / "steps.jsonl"))
    wa, wb = (load_file(str(root / d / "final_policy" / "model.safetensors")) for d in ("one", "killed"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
