"""Aggregation weights worked out by hand.

The shared batch (LOSS, MASK): 2 prompts x G=2 samples, one row each. Unmasked token
losses per sample: p0 -> [6] and [1, 2, 3], p1 -> [4, 4] and [2, 2]; so lengths
(masked tokens) p0 -> [1, 3], p1 -> [2, 2]. Some tests build their own batch, noted there.
"""
import torch

from scalerl.aggregation import AGGREGATIONS
from scalerl.aggregation.prompt import prompt_mean
from scalerl.aggregation.sample import sample_mean
from scalerl.aggregation.token import token_mean

LOSS = torch.tensor([[6.0, 0, 0], [1.0, 2.0, 3.0], [4.0, 4.0, 0], [2.0, 2.0, 0]])
MASK = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)


def test_prompt_level():
    # p0: (6 + 1+2+3) / 4 tokens = 3.0 ; p1: (8 + 4) / 4 = 3.0 ; mean over prompts = 3.0
    loss, units = prompt_mean(LOSS, MASK, group_size=2)
    assert torch.isclose(loss, torch.tensor(3.0)) and units == 2


def test_sample_level():
    # per-sample means: 6, 2, 4, 2 -> mean 3.5
    loss, units = sample_mean(LOSS, MASK, group_size=2)
    assert torch.isclose(loss, torch.tensor(3.5)) and units == 4


def test_token_level():
    # (6 + 6 + 8 + 4) / 8 tokens = 3.0
    loss, units = token_mean(LOSS, MASK, group_size=2)
    assert torch.isclose(loss, torch.tensor(3.0)) and units == 8


def test_weights_differ_when_lengths_differ():
    # One long (4 tok, loss 1) and one short (1 tok, loss 5) sample in one group, plus a second group.
    loss = torch.tensor([[1.0, 1, 1, 1], [5.0, 0, 0, 0], [2.0, 0, 0, 0], [2.0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    p, _ = prompt_mean(loss, mask, 2)   # ((4+5)/5 + 4/2) / 2 = (1.8 + 2) / 2 = 1.9
    s, _ = sample_mean(loss, mask, 2)   # (1 + 5 + 2 + 2) / 4 = 2.5
    t, _ = token_mean(loss, mask, 2)    # (4 + 5 + 2 + 2) / 7 = 13/7
    assert torch.isclose(p, torch.tensor(1.9))
    assert torch.isclose(s, torch.tensor(2.5))
    assert torch.isclose(t, torch.tensor(13 / 7))


def test_dropped_groups_do_not_count():
    mask = MASK.clone()
    mask[2:] = False  # prompt 1 dropped by the filter
    for name, expected, units in (("prompt", 3.0, 2 - 1), ("sample", 4.0, 2), ("token", 12 / 4, 4)):
        loss, u = AGGREGATIONS[name].fn(LOSS, mask, 2, cfg=None)
        assert torch.isclose(loss, torch.tensor(expected)), name
        assert u == units, name


def test_gradient_weights_prompt_level():
    # d loss / d l_it = 1 / (P * tokens_in_group(i)) for prompt-level aggregation.
    x = LOSS.clone().requires_grad_(True)
    prompt_mean(x, MASK, 2)[0].backward()
    expected = torch.tensor([[1 / 8, 0, 0], [1 / 8, 1 / 8, 1 / 8], [1 / 8, 1 / 8, 0], [1 / 8, 1 / 8, 0]])
    assert torch.allclose(x.grad, expected)
