"""Micro-batches with gradient accumulation (``train.micro_batch_tokens``): the split, the
aggregation weights that keep each axis's denominators global, and one update equal to the
single-forward one (docs/trainer-memory.md). The 2-rank check is in tests/test_distributed.py."""
import copy

import pytest
import torch

from scalerl.aggregation import AGGREGATIONS
from scalerl.losses.base import rare_tokens
from scalerl.train.update import aggregation_weights, micro_batches, padding_fraction, policy_update


def test_micro_batches_by_hand():
    # Longest first: 9 alone (2 x 9 > 16), then 8 + 3 (2 x 8 = 16), then 2 + 1.
    assert micro_batches([3, 9, 2, 8, 1], budget=16) == [[1], [3, 0], [2, 4]]
    assert micro_batches([20, 1], budget=16) == [[0], [1]]  # a row over budget goes alone
    assert micro_batches([4, 4, 4, 4], budget=16) == [[0, 1, 2, 3]]
    assert micro_batches([], budget=16) == []
    # One forward pads 5 rows to 9 = 45 positions for 23 tokens; the three parts pad to 9 + 16 + 4 = 29.
    assert padding_fraction([3, 9, 2, 8, 1], [[0, 1, 2, 3, 4]]) == pytest.approx(1 - 23 / 45)
    assert padding_fraction([3, 9, 2, 8, 1], [[1], [3, 0], [2, 4]]) == pytest.approx(1 - 23 / 29)


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_aggregation_weights_reproduce_every_aggregation(name):
    """w = d aggregate / d tok_loss: (w * tok_loss).sum() is the aggregate for any tok_loss, and a
    subset of rows carries its share with the whole batch's denominators."""
    agg = AGGREGATIONS[name].fn
    torch.manual_seed(0)
    mask = torch.rand(6, 5) < 0.6
    mask[2] = False  # a row with no token
    w, units = aggregation_weights(agg, mask, 3)
    for _ in range(3):
        tok_loss = torch.randn(6, 5)
        want, want_units = agg(tok_loss, mask, 3)
        assert (w * tok_loss).sum().item() == pytest.approx(want.item(), rel=1e-6, abs=1e-7)
        assert units == want_units
    assert (w[~mask] == 0).all()
    # Hand-checked for token: every masked token weighs 1 / (masked tokens).
    if name == "token":
        assert torch.allclose(w[mask], torch.full_like(w[mask], 1 / mask.sum().item()))


class OneRank:
    rank, world, device, mesh = 0, 1, torch.device("cpu"), None

    def all_sum(self, x):
        return x

    def all_cat(self, x):
        return x


@pytest.mark.parametrize("aggregation,correction", [("prompt", "none"), ("sample", "none"), ("token", "none"),
                                                    ("prompt", "icepop")])
def test_micro_batched_update_equals_one_forward(tiny_cfg, aggregation, correction):
    """One policy_update with micro-batches of at most 24 padded tokens (rows split across
    micro-batches, groups too) gives the single-forward update to float rounding; with a
    correction's per-token weights (IcePop, some tokens masked) too."""
    from scalerl.train.rollout import rollout
    from scalerl.train.run_plan import plan_run, resolve
    from scalerl.train.setup import build_run, prepare_start

    cfg = tiny_cfg("batch.prompts=4", "batch.generations=4", "batch.minibatches=2", f"aggregation={aggregation}",
                   f"correction={correction}", "loss=cispo", "length=truncate")
    task, ckpt, tok = prepare_start(cfg)
    plan = plan_run(cfg, OneRank(), resolve(cfg, torch.device("cpu"), tok))
    r = build_run(plan, task, ckpt)
    gen_kw = dict(generator=r.generator, tok=plan.sampling.tok, max_new_tokens=12, temperature=1.0, device=torch.device("cpu"))
    ro = rollout(list(range(4)), slice(0, 4), task, group=4, seed=0, step=1, draw_lengths=plan.recipe.draw_lengths,
                 trains_on=plan.recipe.trains_on, refill_rounds=0, sampler=r.sampler, **gen_kw)
    # The warm-started model answers in equal lengths: cut rows to ragged ones (1..5 tokens) so
    # that the bucketing has something to sort and groups split across micro-batches.
    cut = torch.arange(ro.gen.present.shape[1])[None] < (1 + torch.arange(16) * 3 % 5)[:, None]
    ro.gen.present &= cut
    ro.gen.sampled &= cut
    if correction != "none":  # generator log-probs off by up to +-2 nats: IcePop masks some tokens, weighs others
        ro.gen.logprobs += 4 * torch.rand(ro.gen.logprobs.shape, generator=torch.Generator().manual_seed(5)) - 2
    lengths = ro.gen.present.sum(-1)
    assert lengths.max() > lengths.min() and ro.gen.sampled.any()
    keep = torch.ones(4, dtype=torch.bool)
    adv = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))
    start = copy.deepcopy(r.trainer.state_dict())
    # Plain SGD (lr 1): the weight change is the clipped gradient itself. AdamW's first step,
    # g / (|g| + eps), would turn rounding in near-zero gradient entries into lr-sized changes.
    sgd = torch.optim.SGD(r.params, lr=1.0)
    outs, weights = [], []
    for budget in (0, 24):
        r.trainer.load_state_dict(start)
        outs.append(policy_update(r.trainer, sgd, r.params, ro, adv, keep, plan.recipe, minibatches=2,
                                  grad_clip=1.0, temperature=1.0, rank_groups=slice(0, 4), dist=OneRank(),
                                  micro_batch_tokens=budget))
        weights.append({k: v.clone() for k, v in r.trainer.state_dict().items()})
    one, micro = outs
    if correction != "none":  # the weights did act: some tokens masked, and the extra forward ran
        assert 0 < one["correction_masked_frac"] < 1 and one["correction_forward_s"] > 0
    assert one.keys() == micro.keys()
    if correction == "none":  # each kept sampled token enters the rare-token tail once, at its generator log-prob
        assert one["rare_tokens"] == int(rare_tokens(ro.gen.logprobs, ro.gen.sampled).sum())
    for k in (k for k in one if not k.endswith("_s")):  # not the timings
        # The loss nearly cancels (see below): its rounding shows at 1e-4 of its value. The
        # generator-trainer mismatch and the ratio's deviation are differences of log-probs that
        # are equal but for rounding: they sit at the log-probs' own fp32 rounding (micro-batches
        # padded to other widths, below): up to 9.5e-7 apart on an AMD EPYC, within 1e-7 on the Intel
        # Xeon it was written on. With IcePop's +-2-nat offsets the mismatch is large and held to rel.
        rounding = 4e-6 if k.startswith(("mismatch_", "logp_mismatch", "ratio_dev")) else 1e-7
        assert micro[k] == pytest.approx(one[k], rel=3e-4, abs=rounding), k
    moved = max((weights[0][k] - start[k]).abs().max().item() for k in start)
    worst = max((weights[1][k] - weights[0][k]).abs().max().item() for k in start)
    # Centred advantages make the loss and its gradient a near-cancelling sum, which magnifies the
    # fp32 rounding of micro-batches padded to other widths (~1e-6 in log-probs) about a hundredfold;
    # a wrong denominator (per micro-batch instead of global) is off by tens of percent.
    assert worst < 1e-4 * moved and moved > 1e-3, (worst, moved)
