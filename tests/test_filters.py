"""Zero-variance mask, NPR retirement at exactly the threshold, sampler state."""
import torch

from scalerl.filters import FILTERS
from scalerl.filters.zero_variance import nonzero_variance
from scalerl.train.prompt_stream import PromptSampler


def test_zero_variance_mask():
    r = torch.tensor([[0.0, 0, 0, 0], [1.0, 0, 1, 1], [1.0, 1, 1, 1], [0.5, 0.5, 0.5, 0.25]])
    assert nonzero_variance(r).tolist() == [False, True, False, True]
    assert FILTERS["none"].fn(r, cfg=None).tolist() == [True] * 4
    for name in ("zero_variance", "zero_variance_npr", "dapo_dynamic"):
        assert FILTERS[name].fn(r, cfg=None).tolist() == [False, True, False, True]


def test_npr_retires_at_exactly_threshold():
    s = PromptSampler(n=8, seed=0, retire_at=0.9)
    assert s.record([0, 1, 2, 3], torch.tensor([0.9, 0.875, 1.0, 0.8999], dtype=torch.float64)) == 2
    assert s.retired == {0, 2}
    # 16 samples: 15/16 = 0.9375 retires, 14/16 = 0.875 does not; 9/10 retires.
    assert s.record([4, 5, 6], torch.tensor([15 / 16, 14 / 16, 9 / 10], dtype=torch.float64)) == 2
    assert s.retired == {0, 2, 4, 6}


def test_sampler_retires_from_the_next_epoch_only():
    s = PromptSampler(n=4, seed=0, retire_at=0.9)
    first = s.next(2)
    assert s.record(first, torch.tensor([1.0, 0.5])) == 1
    rest = s.next(2)  # same epoch: the retired prompt is not removed mid-epoch
    assert sorted(first + rest) == [0, 1, 2, 3]
    nxt = s.next(3)  # next epoch: 3 live prompts, the retired one absent
    assert first[0] not in nxt and sorted(nxt) == sorted(set(range(4)) - {first[0]})
    assert s.epochs_done == 7 / 4


def test_sampler_without_npr_never_retires():
    s = PromptSampler(n=3, seed=1, retire_at=None)
    assert s.record(s.next(3), torch.tensor([1.0, 1.0, 1.0])) == 0
    assert sorted(s.next(3)) == [0, 1, 2]


def test_sampler_state_round_trip_continues_identically():
    a = PromptSampler(n=10, seed=3, retire_at=0.9)
    a.record(a.next(7), torch.tensor([1.0, 0, 0, 0, 0, 0, 0.95]))
    b = PromptSampler(n=10, seed=3, retire_at=0.9)
    b.load_state_dict(a.state_dict())
    assert [a.next(4) for _ in range(5)] == [b.next(4) for _ in range(5)]
    assert a.retired == b.retired and len(a.retired) == 2


def test_npr_at_an_epoch_boundary_inside_one_step():
    """A step whose batch crosses into the next epoch: no prompt twice in that step, and the
    prompts it retires never come back (the next epoch's order was built before they were)."""
    for seed in range(40):
        s = PromptSampler(n=6, seed=seed, retire_at=0.9)
        s.next(4)  # step 1: 4 of epoch 0
        step2 = s.next(4)  # step 2: the last 2 of epoch 0 + 2 of epoch 1
        assert len(set(step2)) == 4, (seed, step2)
        s.record(step2, torch.ones(4))  # all four solved: retired
        later = [i for _ in range(4) for i in s.next(1)]  # the rest of epoch 1 and beyond
        assert not set(later) & set(step2), (seed, step2, later)
        assert sorted(later) == sorted(list(set(range(6)) - set(step2)) * 2)  # the 2 live prompts, once an epoch
