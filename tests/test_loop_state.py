"""The loop's typed state: accounting by hand, and a checkpoint's ``state`` read back."""
import doctest

import scalerl.launch.early_stop
import scalerl.train.loop_state
from scalerl.train.loop_state import LoopState


def test_the_doctests_hold():
    for module in (scalerl.train.loop_state, scalerl.launch.early_stop):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_a_step_is_accounted_by_hand():
    s = LoopState(step=4, compute=1e9, tokens=10, wall_s=2.0, device_hours=0.5)
    s.advance(5, 3e9, 7.0, 36.0, 3)   # new tokens arrive as a float from an all-reduce
    assert (s.step, s.compute, s.tokens, s.wall_s) == (5, 4e9, 17, 38.0)
    assert type(s.tokens) is int and abs(s.device_hours - (0.5 + 36.0 * 3 / 3600)) < 1e-15
    assert s.axes() == {"step": 5, "compute": 4e9, "device_hours": s.device_hours, "tokens": 17, "wall_s": 38.0}


def test_a_checkpoints_state_round_trips_and_old_keys_are_left_behind():
    s = LoopState(step=3, compute=1.5e9, nan_skips=1, nan_streak=1, wandb_id="abc", window=[{"loss": 0.25}])
    saved = s.to_dict()
    assert LoopState.from_dict(saved) == s
    assert LoopState.from_dict({**saved, "retired_key": 7}) == s          # written by another version
    assert LoopState.from_dict({"step": 3}) == LoopState(step=3)           # an older one: the rest start at 0
    result = s.result()
    assert "window" not in result and "nan_streak" not in result and result["nan_skips"] == 1
    saved["window"].append({"loss": 1.0})                                  # to_dict is a copy
    assert s.window == [{"loss": 0.25}]
