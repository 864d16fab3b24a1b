"""The corridors of docs/architecture.md ("Following a run's start"), held where they are: one traced
step of the default recipe, from where each arm lands, through ``benchmarks/follow_cfg.py``, the
command that measures them.

A count that creeps back up fails here: a publish that enters one more module (a review's mend once
made the push ask ``sharding.is_sharded`` again, 7 files to 8, and nothing noticed), a set-up that
climbs back into the loop, a second tokenizer load.
"""
from __future__ import annotations

import importlib.util

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow


def follow_cfg():
    spec = importlib.util.spec_from_file_location("follow_cfg", REPO / "benchmarks" / "follow_cfg.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_publish_runs_six_files_and_an_arm_climbs_back_at_most_eight_times_on_the_default_recipe():
    # From where each arm lands (launch/task.py: run_arm, through python -m scalerl.sweep's entry, in
    # process), the default recipe (pipeline_rl, a generator process), one step.
    seen = follow_cfg().follow([], entry="run_arm")
    assert sorted(seen["push_files"]) == [
        "generation/fleet/pool.py", "generation/transfer/buckets.py", "generation/transfer/wire.py",
        "train/loop.py", "train/schedules/pipeline.py", "train/weights.py"]
    assert len(seen["climbs"]) <= 8, seen["climbs"]  # 7 today; train()'s own: train/setup.py:build alone
    assert [c for c in seen["climbs"] if c.startswith("train/")] == ["train/loop.py:train", "train/setup.py:build"]
    assert seen["setup_entries"] == 1
    assert len(seen["load_entries"]) <= 3, seen["load_entries"]
    assert seen["tokenizer_loads"] == ["train/setup.py"]
