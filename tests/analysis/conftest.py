"""Fixtures for the analysis tests: fake scalerl run directories and synthetic curves.

The fake runs follow the trainer's contract (see analysis/io.py) without importing the
trainer: config.yaml, metrics.jsonl (optionally with a partial last line), summary.json.
"""
import json

import numpy as np
import pytest
import yaml

from analysis.synthetic import simulate_curve


def write_run(root, rel, *, compute=None, reward=None, loss="cispo", seed=0, arm=None, status="done",
              summary=True, partial_line=False, error=None, epoch=None, extra=None):
    """Write one fake run directory under root/rel and return its path."""
    run_dir = root / rel
    run_dir.mkdir(parents=True, exist_ok=True)
    compute = [] if compute is None else list(compute)
    reward = [] if reward is None else list(reward)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for i, (c, r) in enumerate(zip(compute, reward)):
            record = {"step": i * 10, "compute": c, "device_hours": c / 1e12, "tokens": int(c / 1e6),
                      "epoch": None if epoch is None else epoch[i],
                      "pass_rate": None if r is None or r != r else r, "train_reward": 0.0}
            f.write(json.dumps(record) + "\n")
        if partial_line:
            f.write('{"step": 9999, "compute": 1.0e1')
    config = {"loss": {"name": loss, "eps_max": 4.0}, "aggregation": {"name": "prompt"},
              "adv_norm": {"name": "batch"}, "precision": {"name": "fp32_head"}, "recipe": None,
              "seed": seed, "batch": {"name": "b768", "prompts": 48, "generations": 16}, **(extra or {})}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    if summary:
        (run_dir / "summary.json").write_text(json.dumps({
            "status": status, "run_name": rel.replace("/", "_"), "config_hash": f"c-{rel}",
            "arm_hash": arm or f"arm-{loss}", "axes": {"loss": loss, "aggregation": "prompt"},
            "seed": seed, "loss_clamp": "sg(min(ratio, 4.0))", "final_pass_rate": reward[-1] if reward else None,
            "best_pass_rate": None, "error": error, "log": None}))
    return run_dir


@pytest.fixture
def make_run(tmp_path):
    return lambda rel, **kw: write_run(tmp_path, rel, **kw)


@pytest.fixture
def curve():
    """A Table-1-like run (ScaleRL 768): A 0.61, B 1.92, C_mid 2542, R0 0.30, binomial noise."""
    compute, reward, _ = simulate_curve(0.61, 1.92, 2542.0, 0.30, n_points=100, rng=7)
    return compute, reward


@pytest.fixture
def sweep(tmp_path):
    """A small sweep: 2 arms x 2 seeds (one nested a level down), a failed run, a 3-point run."""
    rng = np.random.default_rng(0)
    for loss, A in (("cispo", 0.61), ("dapo", 0.57)):
        for seed in (0, 1):
            c, r, _ = simulate_curve(A, 1.9, 2500.0, 0.3, n_points=40, rng=rng)
            rel = f"0/{loss}-s{seed}" if seed == 0 else f"{loss}-s{seed}"
            write_run(tmp_path, rel, compute=c * 1e12, reward=r, loss=loss, seed=seed,
                      partial_line=(seed == 1))
    write_run(tmp_path, "grpo-s0", compute=[0.0], reward=[0.3], loss="grpo", status="failed",
              error="CUDA out of memory")
    write_run(tmp_path, "short", compute=[0.0, 1e14, 2e14], reward=[0.3, 0.31, 0.33], loss="gspo")
    return tmp_path
