"""End-to-end through the CLI: resume after kill, multirun, relaunch, failures and W&B
offline. The launches go through ``helpers.cli`` (the entry point in a process forked from a
server that imported scalerl once) except those a signal interrupts, which are subprocesses;
every recipe preset trains through ``train()`` in-process."""
import signal
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import ANSWERS_ONLY, REPO, VOLATILE, cli, popen_cli, read_rows, wait_for

pytestmark = pytest.mark.slow
# sync: bit-reproducible; the answers-only shape: resume, relaunch and W&B do not depend on what a
# completion holds, and the reasoning shape is the quick start's (tests/test_quickstart_wandb.py)
SHORT = ["train.steps=30", "train.eval_every=5", "train.threads=1", "logger=none", "async=sync", *ANSWERS_ONLY]


def only_run(out: Path) -> Path:
    (run_dir,) = list((out / "runs").iterdir())
    return run_dir


def stable(rows):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def test_kill_and_resume_loses_and_duplicates_no_eval_point(tmp_path):
    ref_out, out = tmp_path / "ref", tmp_path / "int"
    cli(SHORT, ref_out)
    ref = read_rows(only_run(ref_out) / "metrics.jsonl")
    assert [r["step"] for r in ref] == [0, 5, 10, 15, 20, 25, 30]

    # 1) SIGTERM: checkpoints at the current step and stops cleanly.
    p = popen_cli(SHORT, out, tmp_path / "a.log")
    wait_for(lambda: any(out.glob("runs/*/metrics.jsonl")) and len(read_rows(only_run(out) / "metrics.jsonl")) >= 3,
             what="3 eval rows", proc=p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == 143  # checkpointed, then 128 + SIGTERM: stopped, not finished
    run_dir = only_run(out)
    progress = yaml.safe_load((run_dir / "progress.json").read_text())
    assert progress["status"] == "interrupted"
    assert (run_dir / "checkpoints" / f"step_{progress['step']:08d}.pt").exists()
    # 2) SIGKILL: no chance to save; the resume falls back to the last checkpoint.
    p = popen_cli(SHORT, out, tmp_path / "b.log")
    wait_for(lambda: len(read_rows(run_dir / "metrics.jsonl")) >= 5, what="5 eval rows", proc=p)
    p.kill()
    p.wait(timeout=60)
    # 3) Finish with the same command.
    proc = cli(SHORT, out)
    assert "resuming" in proc.stdout
    got = read_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in got] == [0, 5, 10, 15, 20, 25, 30]  # none lost, none duplicated
    assert stable(got) == stable(ref)  # and bit-identical to the uninterrupted run
    # A finished run is skipped by a relaunch.
    again = cli(SHORT, out)
    assert "already finished" in again.stdout and len(read_rows(run_dir / "metrics.jsonl")) == 7


def test_multirun_of_two_arms_then_relaunch_skips(tmp_path):
    args = ["-m", "loss=cispo,dapo", "train.steps=4", "train.eval_every=2", "logger=none"]
    cli(args, tmp_path)
    sweep = tmp_path / "sweeps" / "loss=cispo,dapo+train.eval_every=2+train.steps=4"   # named from its overrides
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.startswith("loss="))
    assert [p.name.split(",")[0] for p in runs] == ["loss=cispo", "loss=dapo"]
    for p in runs:
        assert (p / "config.yaml").exists() and (p / "summary.json").exists()
        assert [r["step"] for r in read_rows(p / "metrics.jsonl")] == [0, 2, 4]
        assert yaml.safe_load((p / "config.yaml").read_text())["loss"]["name"] in ("cispo", "dapo")
    board = pd.read_csv(sweep / "leaderboard.csv")
    assert {"run", "rank", "status", "A", "A_lo", "A_hi", "B", "C_mid", "R0", "loss", "loss_clamp"} <= set(board.columns)
    assert set(board["loss"]) == {"cispo", "dapo"}
    mtimes = {p: (p / "metrics.jsonl").stat().st_mtime for p in runs}
    again = cli(args, tmp_path)
    assert "launching 0 arm(s); 2 already done" in again.stdout
    assert mtimes == {p: (p / "metrics.jsonl").stat().st_mtime for p in runs}
    status = cli([*args, "--status"], tmp_path)
    assert status.stdout.count("done") >= 2 and "launching" not in status.stdout


def test_failed_arm_is_reported_and_only_it_reruns(tmp_path):
    from taskdata import MATH_ROWS, write_jsonl

    study = tmp_path / "mixed.yaml"
    data = write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)
    # A chat template the tiny tokenizer lacks: only the arm, which loads the tokenizer, can tell
    # (a file that is not JSON is refused at launch now, scalerl/launch/inputs.py).
    study.write_text(yaml.safe_dump({"arms": [
        {"overrides": ["loss=cispo"]},
        {"overrides": ["loss=dapo", "task=math", f"task.path={data}", "task.prompt.template=chat",
                       "model.warmstart.enabled=false"]},
    ]}))
    args = ["-m", f"sweep={study}", "train.steps=2", "train.eval_every=2", "logger=none"]
    first = cli(args, tmp_path / "out", check=False)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "FAILED" in first.stdout and "task.prompt.template" in first.stdout and "log:" in first.stdout
    board = pd.read_csv(tmp_path / "out" / "sweeps" / "mixed+train.eval_every=2+train.steps=2" / "leaderboard.csv")
    assert sorted(board["status"].str.contains("failed")) == [False, True]
    second = cli(args, tmp_path / "out", check=False)
    assert "launching 1 arm(s); 1 already done" in second.stdout


def test_wandb_offline_run_keeps_its_id_across_a_resume(tmp_path):
    args = ["train.steps=20", "train.eval_every=5", "train.threads=1", "logger=wandb", *ANSWERS_ONLY]
    p = popen_cli(args, tmp_path, tmp_path / "a.log")
    wait_for(lambda: any(tmp_path.glob("runs/*/metrics.jsonl")) and len(read_rows(only_run(tmp_path) / "metrics.jsonl")) >= 2,
             what="2 eval rows", proc=p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == 143  # checkpointed, then 128 + SIGTERM: stopped, not finished
    cli(args, tmp_path)
    run_dir = only_run(tmp_path)
    run_id = (run_dir / "wandb_id").read_text().strip()
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(d.name.endswith(run_id) for d in offline)
    record = (offline[-1] / f"run-{run_id}.wandb").read_bytes()
    assert b"eval/pass_rate" in record and b"train/truncation_rate" in record


def test_every_recipe_runs_end_to_end(tmp_path):
    # In-process through train(): the same runs as `-m sweep=recipes train.steps=3`, without a
    # sweep's processes; the sweep path itself is tested above.
    from scalerl.config import compose, validate
    from scalerl.train.loop import train

    recipes = yaml.safe_load((REPO / "sweeps" / "recipes.yaml").read_text())["grid"]["recipe"]
    assert set(recipes) == {"scalerl", "deepseek_grpo", "qwen_dapo", "magistral", "minimax"}
    for name in recipes:
        cfg = validate(compose(["logger=none", "train.threads=1", f"recipe={name}", "train.steps=3", "train.eval_every=3"]))
        assert cfg.recipe == name
        run_dir = tmp_path / name
        assert train(cfg, run_dir, run_name=name, group="recipes", config_dict={})["status"] == "done", name
        assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [0, 3], name
