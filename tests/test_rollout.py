"""DAPO refill bookkeeping: replacing dropped groups keeps everything aligned."""
import torch

from scalerl.generation import Generation
from scalerl.train.rollout import Rollout, replace_groups


def _ro(index, width, fill, prompt_width):
    n = len(index) * 2  # G = 2
    gen = Generation(tokens=torch.full((n, width), fill), logprobs=torch.full((n, width), -float(fill)),
                     sampled=torch.ones(n, width, dtype=torch.bool), present=torch.ones(n, width, dtype=torch.bool),
                     truncated=torch.zeros(n, dtype=torch.bool), interrupted=torch.zeros(n, dtype=torch.bool),
                     version=torch.zeros(n, width, dtype=torch.long))
    p = len(index)
    return Rollout(list(index), torch.full((p, prompt_width), fill), torch.ones(p, prompt_width, dtype=torch.long), gen,
                   torch.full((p, 2), float(fill)), torch.full((p, 2), float(fill)), 10 * fill)


def test_replace_groups_swaps_rows_and_pads_both_sides():
    old = _ro([7, 8, 9], width=3, fill=1, prompt_width=4)
    fresh = _ro([42], width=5, fill=2, prompt_width=6)
    ro = replace_groups(old, [1], fresh)
    assert ro.prompt_index == [7, 42, 9]
    assert ro.gen.tokens.shape == (6, 5) and ro.prompt_ids.shape == (3, 6)
    assert ro.gen.tokens[2:4].tolist() == [[2] * 5] * 2  # group 1 = rows 2, 3
    assert ro.gen.present[0].tolist() == [True] * 3 + [False] * 2  # right padding is absent
    assert ro.prompt_mask[0].tolist() == [0, 0, 1, 1, 1, 1] and ro.prompt_ids[1].tolist() == [2] * 6  # left padding
    assert ro.correct[:, 0].tolist() == [1.0, 2.0, 1.0]
    assert ro.gen.logprobs[:, 0].tolist() == [-1.0, -1.0, -2.0, -2.0, -1.0, -1.0]
    assert ro.gen_tokens == 30
