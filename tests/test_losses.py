"""Every loss against hand-computed values, gradients included."""
import math

import torch

from scalerl.losses import LOSSES
from scalerl.losses.base import CLIPPED, rare_tail_stats, rare_tokens
from scalerl.losses.cispo import CispoConfig, cispo_loss
from scalerl.losses.dapo import DapoConfig, dapo_loss
from scalerl.losses.grpo import GrpoConfig, grpo_loss
from scalerl.losses.gspo import GspoConfig, gspo_loss


def _leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_cispo_value_and_stop_gradient():
    # Token ratios: 2 (inside the cap) and 8 (above eps_max=4); A = +1.
    logp = _leaf([[math.log(0.5), math.log(0.8)]])
    behav = torch.tensor([[math.log(0.25), math.log(0.1)]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, m = cispo_loss(logp, behav, torch.tensor([1.0], dtype=torch.float64), mask, cfg=CispoConfig(eps_max=4.0))
    # loss_t = -min(ratio, 4) * A * logp
    expected = [-2.0 * math.log(0.5), -4.0 * math.log(0.8)]
    assert torch.allclose(loss, torch.tensor([expected], dtype=torch.float64))
    loss.sum().backward()
    # Stop-gradient on the weight: d loss / d logp = -min(ratio, 4) * A, NOT -(ratio*logp)' which would add ratio*logp.
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -4.0]], dtype=torch.float64))
    # The clipped token still carries gradient (CISPO's point vs PPO), and it is counted as clipped.
    assert m["clip_frac"].item() == 0.5


def test_cispo_lower_clip_optional():
    logp = _leaf([[math.log(0.1)]])
    behav = torch.tensor([[math.log(0.5)]], dtype=torch.float64)  # ratio 0.2
    mask = torch.ones(1, 1, dtype=torch.bool)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    no_floor, m0 = cispo_loss(logp, behav, adv, mask, cfg=CispoConfig(eps_max=4.0))
    floored, m1 = cispo_loss(logp, behav, adv, mask, cfg=CispoConfig(eps_max=4.0, eps_min=0.5))
    assert math.isclose(no_floor.item(), 0.2 * math.log(0.1))  # -0.2 * (-1) * logp
    assert math.isclose(floored.item(), 0.5 * math.log(0.1))
    assert m0["clip_frac"].item() == 0.0 and m1["clip_frac"].item() == 1.0


def test_dapo_clips_both_sides():
    # ratios 1.5 (A>0, above 1+0.28), 0.5 (A<0, below 1-0.2), 1.1 (inside)
    behav = torch.zeros(3, 1, dtype=torch.float64)
    logp = _leaf([[math.log(1.5)], [math.log(0.5)], [math.log(1.1)]])
    adv = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    loss, m = dapo_loss(logp, behav, adv, torch.ones(3, 1, dtype=torch.bool), cfg=DapoConfig(eps_low=0.2, eps_high=0.28))
    assert torch.allclose(loss.flatten(), torch.tensor([-1.28, 0.8, -1.1], dtype=torch.float64))
    loss.sum().backward()
    # Clipped tokens get no gradient; the inside token gets -A * ratio.
    assert torch.allclose(logp.grad.flatten(), torch.tensor([0.0, 0.0, -1.1], dtype=torch.float64))
    assert abs(m["clip_frac"].item() - 2 / 3) < 1e-6


def test_dapo_unclipped_side_keeps_gradient():
    # ratio 1.5 with A<0: min(-1.5, -1.28) = -1.5 -> the unclipped branch, gradient flows.
    logp = _leaf([[math.log(1.5)]])
    loss, m = dapo_loss(logp, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64),
                        torch.ones(1, 1, dtype=torch.bool), cfg=DapoConfig())
    assert math.isclose(loss.item(), 1.5)
    loss.sum().backward()
    assert math.isclose(logp.grad.item(), 1.5)
    assert m["clip_frac"].item() == 0.0


def test_grpo_is_symmetric_clip():
    logp = _leaf([[math.log(1.25)], [math.log(0.75)]])
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, _ = grpo_loss(logp, torch.zeros(2, 1, dtype=torch.float64), adv, mask, cfg=GrpoConfig(eps=0.2))
    assert torch.allclose(loss.flatten(), torch.tensor([-1.2, 0.8], dtype=torch.float64))


def test_gspo_sequence_ratio_value_and_gradient():
    # Token log-ratios 0.1 and -0.3 -> sequence log-ratio -0.1 -> s = exp(-0.1) = 0.904837.
    logp = _leaf([[0.1 - 1.0, -0.3 - 2.0, 0.0]])
    behav = torch.tensor([[-1.0, -2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])  # the third token is padding
    cfg = GspoConfig(eps_low=3e-3, eps_high=4e-3)
    loss, m = gspo_loss(logp, behav, torch.tensor([-1.0], dtype=torch.float64), mask, cfg=cfg)
    s = math.exp(-0.1)
    # A<0: min(s*A, clip(s, .997, 1.004)*A) = min(-0.9048, -0.997) = -0.997 -> clipped, value 0.997 per token
    assert torch.allclose(loss[0, :2], torch.tensor([0.997, 0.997], dtype=torch.float64))
    assert m["clip_frac"].item() == 1.0
    assert math.isclose(m["seq_ratio_mean"].item(), s, rel_tol=1e-12)
    # A>0: unclipped branch s*A, every token sees the *sequence* ratio; gradient per token = -s*A.
    logp2 = _leaf([[0.1 - 1.0, -0.3 - 2.0, 0.0]])
    loss2, m2 = gspo_loss(logp2, behav, torch.tensor([1.0], dtype=torch.float64), mask, cfg=cfg)
    assert torch.allclose(loss2[0, :2], torch.tensor([-s, -s], dtype=torch.float64))
    (loss2 * mask).sum().backward()
    assert torch.allclose(logp2.grad, torch.tensor([[-s, -s, 0.0]], dtype=torch.float64))
    assert m2["clip_frac"].item() == 0.0


def test_clamp_metadata_is_exact():
    assert CispoConfig(eps_max=5.0).clamp() == "sg(clip(ratio, None, 5))*A*logp"
    assert DapoConfig(eps_low=0.2, eps_high=0.26).clamp() == "min(ratio*A, clip(ratio, 0.8, 1.26)*A)"
    assert set(LOSSES) == {"cispo", "dapo", "gspo", "grpo"}


def test_rare_tail_by_hand():
    # Behaviour probabilities 0.01, 0.04, 0.5, 0.02 (masked out), 0.03; ratios 1.0, 1.5, 3.0, 9.0, 2.0.
    # Rare (π_gen < 0.05, in the mask): positions 0, 1, 4 with ratios 1.0, 1.5, 2.0; the masked 9.0 and the
    # common 3.0 stay out. p99 of [1.0, 1.5, 2.0]: rank 0.99 x 2 = 1.98 -> 1.5 + 0.98 x 0.5 = 1.99.
    behav = torch.log(torch.tensor([[0.01, 0.04, 0.5], [0.02, 0.03, 0.9]], dtype=torch.float64))
    ratio = torch.tensor([[1.0, 1.5, 3.0], [9.0, 2.0, 1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [False, True, False]])
    clipped = torch.tensor([[False, True, True], [True, True, False]])
    rare = rare_tokens(behav, mask)
    assert rare.tolist() == [[True, True, False], [False, True, False]]
    s = rare_tail_stats(ratio[rare], clipped[rare])
    assert s["rare_tokens"] == 3 and s["rare_ratio_max"] == 2.0
    assert math.isclose(s["rare_ratio_p99"], 1.99, rel_tol=1e-12)
    assert math.isclose(s["rare_clip_frac"], 2 / 3, rel_tol=1e-12)  # positions 1 and 4 are past the clip
    assert "rare_clip_frac" not in rare_tail_stats(ratio[rare])  # a loss that reports no clip mask
    assert rare_tail_stats(ratio[rare & False], clipped[rare & False]) == {"rare_tokens": 0}  # none: no NaN


def test_losses_return_their_clip_mask():
    # Ratios 1.5 and 1.1 with A = +1: past DAPO's 1 + 0.28 only the first; CISPO's cap 4 binds on neither;
    # GSPO's sequence ratio exp(mean log) = sqrt(1.65) = 1.28 > 1 + 4e-3 clips the whole row.
    logp = torch.log(torch.tensor([[1.5, 1.1]], dtype=torch.float64))
    behav, adv = torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert dapo_loss(logp, behav, adv, mask, cfg=DapoConfig())[1][CLIPPED].tolist() == [[True, False]]
    assert cispo_loss(logp, behav, adv, mask, cfg=CispoConfig())[1][CLIPPED].tolist() == [[False, False]]
    assert gspo_loss(logp, behav, adv, mask, cfg=GspoConfig())[1][CLIPPED].tolist() == [[True, True]]
