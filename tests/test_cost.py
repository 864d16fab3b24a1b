"""The cost of a sweep before launch (scalerl/config/cost.py, scalerl/launch/cost_plan.py).

The arithmetic by hand; then `--dry-run` through the real entry point prints each arm's compute,
wall time and device-hours with the throughput it assumed, and a bad key is refused in one line.
The estimate against what sweeps then spent is measured in benchmarks/RESULTS.md (calibrate=true).
"""
from __future__ import annotations

import json

import pytest
from helpers import cli

from scalerl.config.cost import (ArmCost, Throughput, arm_cost, assumed, flop_parameters, sharing, step_flops,
                                 sweep_wall)
from scalerl.config.resources import Shape
from scalerl.launch.cost_plan import spent

# vocab 10, hidden 4, 1 layer, 2 heads (kv 2), intermediate 8, context 100, untied
SHAPE = Shape(10, 4, 1, 2, 2, 8, 100, False)


def test_flop_parameters_leave_out_the_input_embedding():
    # layer: 2*16 (q, o) + 2*4*4 (k, v) + 3*4*8 (mlp) + 2*4 (norms) = 32 + 32 + 96 + 8 = 168
    # all: 168 + 10*4*2 (embedding + head) + 4 (final norm) = 252; without the input embedding: 212
    assert SHAPE.parameters() == 252
    assert flop_parameters(SHAPE) == 212
    assert flop_parameters(Shape(10, 4, 1, 2, 2, 8, 100, True)) == 212   # tied: the head is the embedding


def test_a_step_is_8n_per_token_prompts_counted_once_a_group():
    # 3 prompts of 5 tokens, 4 completions of 10: 3 * (5 + 40) = 135 tokens, 8 * 212 each
    assert step_flops(SHAPE, 3, 4, 5, 10) == 8 * 212 * 135


def test_an_assumed_throughput_says_its_mfu_and_peak():
    gpu = assumed(4, gpu_name="NVIDIA H100 80GB HBM3", mfu=0.5)
    assert gpu.flops_per_s == 4 * 989e12 * 0.5
    assert "MFU 0.5" in gpu.source and "9.89e+14" in gpu.source
    cpu = assumed(1, cores=2, mfu=0.1, peak_flops=1e10)
    assert cpu.flops_per_s == 1e9 and "MFU 0.1" in cpu.source


def test_a_measured_arm_costs_start_plus_steps_plus_evals():
    tp = Throughput(flops_per_s=1e9, source="measured", start_s=30.0, eval_s=4.0, step_flops=5e8)
    cost = arm_cost(SHAPE, steps=100, evals=10, prompts=3, generations=4, completion_budget=10, devices=2,
                    throughput=tp, slowdown=1.5)
    # compute 100 * 5e8 = 5e10; busy 50 s of steps + 40 s of evals, 1.5x slower beside others: 30 + 135
    assert cost.compute == 5e10 and cost.wall_s == pytest.approx(165.0)
    assert cost.device_hours == pytest.approx(165.0 * 2 / 3600)
    # measured with 3 copies side by side: the sharing is in the step and eval times already
    side = Throughput(flops_per_s=1e9, source="measured", start_s=30.0, eval_s=4.0, step_flops=5e8, copies=3)
    assert arm_cost(SHAPE, steps=100, evals=10, prompts=3, generations=4, completion_budget=10, devices=2,
                    throughput=side, slowdown=1.5).wall_s == pytest.approx(120.0)


def test_an_assumed_arm_costs_its_bound_at_the_throughput():
    tp = Throughput(flops_per_s=8 * 212 * 1e3, source="assumed")
    cost = arm_cost(SHAPE, steps=10, evals=3, prompts=3, generations=4, completion_budget=10, devices=1, throughput=tp)
    # prompt tokens: min(10 + 256, 100) - 10 = 90; a step: 8 * 212 * 3 * (90 + 40) = 8 * 212 * 390
    assert cost.compute == 10 * 8 * 212 * 390 and cost.wall_s == pytest.approx(3.9)
    assert "at most" in cost.compute_basis


def test_arms_beside_each_other_share_the_cores():
    assert sharing(3, 1, 2, True) == 1.5
    assert sharing(2, 1, 2, True) == 1.0
    assert sharing(3, 1, 2, True, load=5.0) == pytest.approx(8 / 6)
    assert sharing(8, 4, 2, False) == 1.0                        # GPU arms own their devices


def test_a_sweep_runs_its_arms_slot_by_slot():
    assert sweep_wall([10.0, 10.0, 10.0], 3) == 10.0
    assert sweep_wall([10.0, 20.0, 5.0], 2) == 20.0              # slots: 10 + 5, 20
    assert sweep_wall([10.0, 10.0, 10.0], 1) == 30.0


def test_the_summary_puts_the_estimate_beside_what_the_run_spent(tmp_path):
    est = ArmCost(30, 4, 1e12, "measured", 200.0, 2, Throughput(1e9, "measured")).to_dict()
    (tmp_path / "cost_estimate.json").write_text(json.dumps(est))
    cost = spent(tmp_path / "cost_estimate.json", {"elapsed_s": 300.0, "compute": 5e11, "device_hours": 0.05})
    assert cost["spent_over_estimated"]["wall_s"] == 1.5
    assert cost["spent_over_estimated"]["compute"] == 0.5
    assert cost["spent"]["device_hours"] == pytest.approx(300 * 2 / 3600)      # held: wall x devices
    assert cost["spent"]["device_hours_in_steps"] == 0.05
    assert cost["estimated"]["device_hours"] == pytest.approx(200 * 2 / 3600)
    assert spent(tmp_path / "missing.json", {}) is None


def test_dry_run_prints_each_arms_cost_and_the_sweeps(tmp_path):
    done = cli(["-m", "loss=cispo,dapo", "train.steps=40", "--dry-run", "logger=none",
                "hydra.sweeper.cost.mfu=0.01", "hydra.sweeper.cost.peak_flops=1e11"], tmp_path)
    lines = [x for x in done.stdout.splitlines() if x.startswith("[scalerl] cost of")]
    assert len(lines) == 3, done.stdout
    assert all("(40 steps, at most: every completion at its budget)" in x for x in lines[:2])
    assert "device-hours" in lines[0] and "on 2 device(s)" in lines[0]       # trainer + its generator process
    assert "assumed MFU 0.01 of a CPU of" in lines[2] and "(1e+09 FLOP/s;" in lines[2]
    assert not list((tmp_path / "sweeps").rglob("cost_estimate.json"))      # a dry run writes nothing


def test_a_bad_cost_key_is_refused_in_one_line(tmp_path):
    done = cli(["-m", "loss=cispo", "--dry-run", "logger=none", "hydra.sweeper.cost.mfu=2"], tmp_path, check=False)
    assert done.returncode == 2
    assert "hydra.sweeper.cost.mfu: must be null or a number in (0, 1], got 2" in done.stderr
