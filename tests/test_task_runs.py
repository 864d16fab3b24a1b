"""End-to-end runs on real-format task files: a short RL run with task=math on the tiny
model, its recorded held-out split (identical across arms, checked on resume), and a
task=mix sweep that logs one curve per task which the analysis fits per task."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from helpers import REPO, cli as run_cli  # cli: the entry point in a forked process, without re-importing scalerl
from taskdata import MATH_ROWS, write_jsonl

from scalerl.config import ConfigError
from scalerl.core.jsonio import JsonlFile
from scalerl.train.loop import train

TINY = ["model.warmstart.enabled=false", "batch=small", "batch.prompts=4", "batch.minibatches=1", "batch.generations=4",
        "train.eval_samples=2"]
SHORT_MATH_PROMPT = "task.prompt.instruction=' Box it.'"


def run(cfg, run_dir):
    return train(cfg, run_dir, run_name=run_dir.name, group="test", config_dict={})


@pytest.mark.slow
def test_math_rl_run_on_the_tiny_model_resumes_on_the_same_heldout_split(tiny_cfg, tmp_path):
    data = write_jsonl(tmp_path / "polaris.jsonl", MATH_ROWS)
    args = ["task=math", f"task.path={data}", "task.n_heldout=6", SHORT_MATH_PROMPT, *TINY, "train.eval_every=2"]
    out = run(tiny_cfg(*args, "train.steps=2"), tmp_path / "r")
    assert out["status"] == "done"
    rows = JsonlFile(tmp_path / "r" / "metrics.jsonl").rows()
    assert [r["step"] for r in rows] == [0, 2]
    for r in rows:  # learning is not expected from an untrained tiny model, only a correct run
        assert 0.0 <= r["pass_rate"] == r["pass_rate/math"] <= 1.0
        assert r["response_length/math"] > 0 and 0.0 <= r["truncation_rate/math"] <= 1.0
    split = json.loads((tmp_path / "r" / "heldout.json").read_text())
    assert split["n"] == 6 and {t for t, _ in split["problems"]} == {"math"}
    # resume to step 4 on the same split
    assert run(tiny_cfg(*args, "train.steps=4"), tmp_path / "r")["status"] == "done"
    assert [r["step"] for r in JsonlFile(tmp_path / "r" / "metrics.jsonl").rows()] == [0, 2, 4]
    assert json.loads((tmp_path / "r" / "heldout.json").read_text()) == split
    # the data changed under the run: resuming would measure another curve, so it refuses
    write_jsonl(data, [{**r, "answer": r["answer"] + "0"} for r in MATH_ROWS])
    with pytest.raises(ConfigError) as e:
        run(tiny_cfg(*args, "train.steps=6"), tmp_path / "r")
    assert e.value.key == "task" and "heldout.json" in str(e.value)


@pytest.mark.slow
def test_mix_sweep_logs_a_curve_per_task_and_the_analysis_fits_each(tmp_path, task_files):
    out = tmp_path / "out"
    args = ["-m", "task=mix", "loss=cispo,grpo", f"task.tasks.math.path={task_files['math']}",
            f"task.tasks.code.path={task_files['code']}", "task.tasks.math.n_heldout=4", "task.tasks.code.n_heldout=2",
            "task.tasks.math.prompt.instruction=' Box it.'", "task.tasks.code.prompt.instruction=' Code:'",
            *TINY, "train.steps=4", "train.eval_every=1", "logger=none", "study=mixtest",
            "hydra.launcher.n_parallel=2"]
    run_cli(args, out, timeout=900)
    runs = sorted(p.parent for p in (out / "sweeps" / "mixtest").rglob("summary.json"))
    assert len(runs) == 2
    splits = [json.loads((r / "heldout.json").read_text()) for r in runs]
    assert splits[0] == splits[1]  # every arm evaluates on exactly the same prompts
    assert sorted({t for t, _ in splits[0]["problems"]}) == ["code", "math"]
    for r in runs:
        rows = JsonlFile(r / "metrics.jsonl").rows()
        assert [row["step"] for row in rows] == [0, 1, 2, 3, 4]
        for row in rows:
            assert {"pass_rate/math", "pass_rate/code", "timeout_rate/code", "crash_rate/code",
                    "response_length/code", "truncation_rate/math"} <= set(row)
            assert "timeout_rate/math" not in row  # only code reports timeouts and crashes
            # the overall pass rate is the sample-weighted mean of the two held-out sets (4 and 2 problems)
            assert abs(row["pass_rate"] - (4 * row["pass_rate/math"] + 2 * row["pass_rate/code"]) / 6) < 1e-9
    fit = subprocess.run([sys.executable, "-m", "analysis", "fit", str(out / "sweeps" / "mixtest"), "--out",
                          str(tmp_path / "fit"), "--metric", "pass_rate/*", "--n-boot", "0", "--min-compute", "none", "--plots", "none", "--quiet"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr
    board = pd.read_csv(tmp_path / "fit" / "leaderboard.csv")
    assert sorted(board["metric"]) == ["pass_rate/code", "pass_rate/code", "pass_rate/math", "pass_rate/math"]
    assert all(run.endswith(f"[{m}]") for run, m in zip(board["run"], board["metric"]))
