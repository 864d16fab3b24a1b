"""Each arm of a local sweep gets its own GPUs (scalerl/launch/gpus.py, docs/slurm.md).

The assignment is a pure function, checked on hand-written device lists; then a 2-arm sweep
through the real entry point on a faked 5-GPU box (SCALERL_GPUS: there is no GPU here) checks
that each arm's process saw exactly its share in CUDA_VISIBLE_DEVICES. On a real device,
benchmarks/gpu_check.sh runs the same sweep.
"""
from __future__ import annotations

import json

import pytest
from helpers import ANSWERS_ONLY, arms, cli

from scalerl.core.errors import ConfigError
from scalerl.launch.gpus import assign, visible_gpus

EIGHT = [str(i) for i in range(8)]


@pytest.mark.parametrize("devices, workers, per, expect", [
    (EIGHT, 3, "auto", (3, [["0", "1"], ["2", "3"], ["4", "5"]])),    # 8 // 3 = 2 each, 6 and 7 idle
    (EIGHT, 8, "auto", (8, [[g] for g in EIGHT])),
    (EIGHT, 2, 3, (2, [["0", "1", "2"], ["3", "4", "5"]])),
    (["0", "1"], 3, "auto", (2, [["0"], ["1"]])),                      # fewer GPUs than arms: one each, one queues
    (EIGHT, 4, 3, (2, [["0", "1", "2"], ["3", "4", "5"]])),            # 3 a slot fit twice: two at a time
    (["GPU-a", "GPU-b", "GPU-c"], 1, "auto", (1, [["GPU-a", "GPU-b", "GPU-c"]])),   # UUIDs, as given
    ([], 3, "auto", (3, [[], [], []])),                                # no GPU: CPU arms, nothing set
])
def test_assign_gives_each_slot_a_disjoint_share(devices, workers, per, expect):
    got = assign(devices, workers, per)
    assert got == expect
    flat = [g for share in got[1] for g in share]
    assert len(flat) == len(set(flat))                                 # no GPU in two shares


def test_arms_share_gpus_only_when_asked():
    assert assign(["0", "1"], 3, "auto", share=True) == (3, [["0"], ["1"], ["0"]])
    assert assign(["0", "1", "2"], 2, 2, share=True) == (2, [["0", "1"], ["2", "0"]])


def test_more_gpus_per_arm_than_the_machine_has_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"hydra.launcher.gpus_per_arm: 3 GPUs per arm, and this machine shows 2"):
        assign(["0", "1"], 1, 3)


def test_visible_gpus_reads_the_override_first(monkeypatch):
    monkeypatch.setenv("SCALERL_GPUS", "3, 5,7")
    assert visible_gpus() == ["3", "5", "7"]
    monkeypatch.setenv("SCALERL_GPUS", "")
    assert visible_gpus() == []


@pytest.mark.slow
def test_each_arm_process_sees_exactly_its_share(tmp_path):
    # 5 GPUs, 2 arms at once, gpus_per_arm=auto: 2 each ("0,1" and "2,3"), GPU 4 left idle
    args = ["-m", "loss=cispo,dapo", "train.steps=1", "train.threads=1", "logger=none", "async=sync",
            "hydra.sweeper.n_boot=0", "hydra.launcher.n_parallel=2", "study=gpus", *ANSWERS_ONLY]
    done = cli(args, tmp_path, extra_env={"SCALERL_GPUS": "0,1,2,3,4"})
    assert "GPUs per slot: 0,1 | 2,3" in done.stdout
    seen = sorted(json.loads((d / "derived.json").read_text())["cuda_visible_devices"]
                  for d in arms(tmp_path / "sweeps" / "gpus"))
    assert seen == ["0,1", "2,3"]
    # the same launch recorded each arm's cost estimate beside what it spent (launch/cost_plan.py)
    for d in arms(tmp_path / "sweeps" / "gpus"):
        cost = json.loads((d / "summary.json").read_text())["cost"]
        assert cost["estimated"]["steps"] == 1 and cost["estimated"]["evals"] == 2
        assert cost["spent"]["wall_s"] > 0 and cost["spent"]["compute"] > 0
        assert cost["spent_over_estimated"]["wall_s"] == cost["spent"]["wall_s"] / cost["estimated"]["wall_s"]


def test_a_bad_gpus_per_arm_is_refused_before_launch(tmp_path):
    done = cli(["-m", "loss=cispo,dapo", "hydra.launcher.gpus_per_arm=two", "--dry-run", "logger=none"], tmp_path,
               check=False)
    assert done.returncode == 2
    assert "hydra.launcher.gpus_per_arm: must be auto or an integer >= 1, got 'two'" in done.stderr
