"""``SlicedAdamW`` (scalerl/train/optimizer.py) against torch's AdamW: the same weights and state bit
for bit, step after step, whatever the slice; checkpoints moving both ways; and the temporaries of
one slice, not of the whole tensor."""
import copy

import pytest
import torch

from scalerl.train.optimizer import SlicedAdamW, build_adamw

SHAPES = [(37, 11), (5,), (3, 4, 6), (1000,)]
KW = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


def train(opt, ps, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for i in range(steps):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g) * (i + 1)
        opt.step()


@pytest.mark.parametrize("slice_bytes", [4, 44, 1 << 20])   # one element, a ragged slice, whole tensors
@pytest.mark.parametrize("foreach", [False, True])
def test_the_weights_and_state_are_torchs_bit_for_bit(slice_bytes, foreach):
    a, b = params(), params()
    ours, theirs = SlicedAdamW(a, slice_bytes=slice_bytes, **KW), torch.optim.AdamW(b, foreach=foreach, **KW)
    train(ours, a, 12)
    train(theirs, b, 12)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    for x, y in zip(a, b):
        sa, sb = ours.state[x], theirs.state[y]
        assert sa.keys() == sb.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(sa[k], sb[k]) and sa[k].dtype == sb[k].dtype for k in sa)


def test_a_checkpoint_moves_both_ways():
    a, b = params(), params()
    ours, theirs = SlicedAdamW(a, slice_bytes=44, **KW), torch.optim.AdamW(b, foreach=False, **KW)
    train(ours, a, 3)
    # a deep copy, as a checkpoint file is: a loaded state dict keeps the very tensors it is given
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))       # ours -> torch's
    for x, y in zip(a, b):
        y.data.copy_(x.data)
    train(ours, a, 4, seed=2)
    train(theirs, b, 4, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    back = SlicedAdamW(params(5), slice_bytes=8, **KW)  # torch's -> ours
    back.load_state_dict(copy.deepcopy(theirs.state_dict()))
    c = back.param_groups[0]["params"]
    for x, y in zip(c, b):
        x.data.copy_(y.data)
    train(back, c, 2, seed=3)
    train(theirs, b, 2, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(c, b))


def test_a_step_holds_slices_not_the_whole_tensor(monkeypatch):
    """The largest temporary a step makes (``sqrt``'s) is one slice: counted on the tensors it makes."""
    big = [torch.nn.Parameter(torch.randn(4096))]
    big[0].grad = torch.randn(4096)
    made = []
    real_sqrt = torch.Tensor.sqrt
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda t: made.append(t.numel()) or real_sqrt(t))
    SlicedAdamW(big, slice_bytes=1024, **KW).step()
    assert made == [256] * 16


def test_cuda_keeps_torchs_foreach_and_a_cpu_gets_the_sliced_one():
    ps = params()
    assert type(build_adamw(ps, torch.device("cpu"), **KW)) is SlicedAdamW
    opt = build_adamw(ps, torch.device("cuda"), **KW)   # built, never stepped: no CUDA needed
    assert type(opt) is torch.optim.AdamW and opt.defaults["foreach"] is True


def test_options_it_does_not_compute_are_refused():
    ps = params()
    with pytest.raises(ValueError, match="amsgrad"):
        SlicedAdamW(ps, amsgrad=True, **KW).step()


def test_the_estimate_knows_the_slice():
    from scalerl.config.resources import SLICE_BYTES as ESTIMATED   # config/ imports no torch: a copy
    from scalerl.train.optimizer import SLICE_BYTES

    assert ESTIMATED == SLICE_BYTES
