"""The eval schedule (config/eval_schedule.py): evenly spaced in log steps by default, every N
steps on request, step 0 and the last step always; its settings validated with the key named."""
import pytest

from scalerl.config import compose, validate
from scalerl.config.derive import derive
from scalerl.config.eval_schedule import eval_steps
from scalerl.core.errors import ConfigError

pytestmark = pytest.mark.unit


def test_log_schedule_by_hand():
    # first 10, last 1000, 4 points: 10 * 100^(k/3) = 10, 46.42, 215.44, 1000 -> 10, 46, 215, 1000; plus 0
    assert eval_steps(1000, points=4, first=10) == [0, 10, 46, 215, 1000]
    # first 1, last 8, 4 points: 8^(k/3) = 1, 2, 4, 8 (doubling: even in log steps)
    assert eval_steps(8, points=4, first=1) == [0, 1, 2, 4, 8]
    # 1, 10^(1/4) = 1.78, 3.16, 5.62, 10 -> 1, 2, 3, 6, 10; 6 points over 1..5 steps merge by rounding:
    # 5^(k/5) = 1, 1.38, 1.90, 2.63, 3.62, 5 -> 1, 1, 2, 3, 4, 5
    assert eval_steps(10, points=5, first=1) == [0, 1, 2, 3, 6, 10]
    assert eval_steps(5, points=6, first=1) == [0, 1, 2, 3, 4, 5]
    assert eval_steps(4, points=16, first=10) == [0, 4]  # shorter than first: step 0 and the last


def test_every_n_schedule_keeps_the_last_step():
    assert eval_steps(45, every=20) == [0, 20, 40, 45]
    assert eval_steps(40, every=20) == [0, 20, 40]
    assert eval_steps(4, every=10) == [0, 4]


def test_the_default_is_the_log_schedule_and_derive_counts_its_rows():
    cfg = validate(compose(["logger=none"]))
    assert cfg.train.eval_every is None
    steps = eval_steps(cfg.train.steps, points=cfg.train.eval_points, first=cfg.train.eval_first)
    assert steps[0] == 0 and steps[-1] == cfg.train.steps and derive(cfg).eval_points == len(steps)
    every = validate(compose(["logger=none", "train.eval_every=20", "train.steps=300"]))
    assert derive(every).eval_points == 16  # 0, 20, ..., 300


@pytest.mark.parametrize("override,key", [("train.eval_points=1", "train.eval_points"),
                                          ("train.eval_first=0", "train.eval_first"),
                                          ("train.eval_every=0", "train.eval_every")])
def test_bad_settings_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        validate(compose(["logger=none", override]))
    assert e.value.key == key


def test_a_run_evaluates_at_the_log_schedules_steps(tiny_cfg, tmp_path):
    import json

    from scalerl.train.loop import train

    # 2 * 6^(k/3) = 2, 3.63, 6.60, 12 -> evals at 0, 2, 4, 7, 12
    cfg = tiny_cfg("train.steps=12", "train.eval_points=4", "train.eval_first=2", "train.eval_samples=1")
    train(cfg, tmp_path / "r", run_name="r", group="t", config_dict={})
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 4, 7, 12]
