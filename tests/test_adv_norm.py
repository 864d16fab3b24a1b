"""Advantage normalization by hand: batch vs prompt std, and none."""
import math

import torch

from scalerl.adv_norm.batch import BatchAdvNormConfig, batch_normalized
from scalerl.adv_norm.none import NoAdvNormConfig, centered
from scalerl.adv_norm.prompt import PromptAdvNormConfig, prompt_normalized

# p0 rewards [1, 0, 0, 0] -> centred [.75, -.25, -.25, -.25], group std sqrt(3)/4
# p1 rewards [1, 1, 0, 0] -> centred [.5, .5, -.5, -.5],     group std 0.5
# p2 rewards [1, 1, 1, 1] -> zero variance (dropped by the filter)
R = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0], [1.0, 1, 1, 1]])
KEEP = torch.tensor([True, True, False])
EPS = 1e-12


def test_none_only_centres():
    a = centered(R, KEEP, cfg=NoAdvNormConfig())
    assert torch.allclose(a, torch.tensor([[.75, -.25, -.25, -.25], [.5, .5, -.5, -.5], [0, 0, 0, 0]]))


def test_prompt_level_divides_by_group_std():
    a = prompt_normalized(R, KEEP, cfg=PromptAdvNormConfig(eps=EPS))
    s0 = math.sqrt(3) / 4
    assert torch.allclose(a[0], torch.tensor([.75, -.25, -.25, -.25]) / s0)
    assert torch.allclose(a[1], torch.tensor([1.0, 1, -1, -1]))
    assert torch.all(a[2] == 0)


def test_batch_level_divides_by_one_std():
    a = batch_normalized(R, KEEP, cfg=BatchAdvNormConfig(eps=EPS))
    # Kept centred values: .75, -.25 x3, .5 x2, -.5 x2 -> mean 0, mean of squares = (0.5625 + 3*0.0625 + 4*0.25)/8 = 0.21875
    std = math.sqrt(0.21875)
    assert torch.allclose(a[:2], torch.tensor([[.75, -.25, -.25, -.25], [.5, .5, -.5, -.5]]) / std)
    assert torch.all(a[2] == 0)
    # Unlike prompt-level, the relative scale between prompts is preserved.
    assert torch.isclose(a[0, 0] / a[1, 0], torch.tensor(1.5))


def test_all_dropped_is_zero_not_nan():
    a = batch_normalized(R[2:], torch.tensor([False]), cfg=BatchAdvNormConfig())
    assert torch.all(a == 0)
