"""The quick start (three losses), shortened, with W&B offline, read back from W&B's own
record files: every chart against compute, one namespace per kind of metric, the run's
identity as config and tags, a summary run in the arms' project and group, a sync hint
that names every offline run, and FLOPs per step in derived.json."""
from __future__ import annotations

import glob
import json
import shlex

import pytest
from helpers import cli as run_cli, read_rows  # cli: the entry point in a forked process, without re-importing scalerl
from wandb_records import summary

pytestmark = pytest.mark.slow
NAMESPACES = ("axis/", "eval/", "train/", "progress/")


def test_quick_start_logs_to_wandb_against_compute_with_its_identity(tmp_path):
    args = ["-m", "loss=cispo,dapo,gspo", "train.steps=2", "train.eval_every=1", "logger=wandb"]
    proc = run_cli(args, tmp_path, extra_env={"WANDB_MODE": "offline"})
    home = tmp_path / "sweeps" / "loss=cispo,dapo,gspo+train.eval_every=1+train.steps=2"   # its own home
    arms = sorted(p for p in home.iterdir() if p.name.startswith("loss="))
    assert len(arms) == 3
    offline = set()
    for arm in arms:
        meta = json.loads((arm / "summary.json").read_text())
        (record,) = glob.glob(str(arm / "wandb" / "offline-run-*" / "run-*.wandb"))
        offline.add(str(arm / "wandb" / record.split("/wandb/")[1].split("/")[0]))
        run = summary(record)
        assert run["project"] == "scalerl" and run["group"] == home.name
        assert {f"loss={meta['axes']['loss']}", f"study={home.name}"} <= set(run["tags"])
        for key in ("config_hash", "arm_hash", "loss_clamp", "axes"):
            assert run["config"][key] == meta[key], key
        # every chart of a metric is drawn against compute
        assert run["step_metric"]["eval/*"] == run["step_metric"]["train/*"] == "axis/compute"
        keys = {k for row in run["history"] for k in row if not k.startswith("_")}
        assert {"eval/pass_rate", "axis/compute", "train/loss", "train/entropy"} <= keys
        assert all(k.startswith(NAMESPACES) for k in keys), sorted(k for k in keys if not k.startswith(NAMESPACES))
        evals = [row for row in run["history"] if "eval/pass_rate" in row]
        rows = read_rows(arm / "metrics.jsonl")
        assert [r["eval/pass_rate"] for r in evals] == [r["pass_rate"] for r in rows]
        assert all(r["axis/compute"] == m["compute"] for r, m in zip(evals, rows))
        derived = json.loads((arm / "derived.json").read_text())
        assert derived["flops_per_step"] == pytest.approx(rows[-1]["compute"] / 2)       # 2 steps
        assert derived["flops_per_step_over_steps"] == 2
    (summary_record,) = glob.glob(str(home / "wandb" / "offline-run-*" / "run-*.wandb"))
    report = summary(summary_record)
    assert (report["project"], report["group"], report["job_type"]) == ("scalerl", home.name, "analysis")
    assert "summary" in report["tags"]
    assert any("leaderboard/path" in row for row in report["history"])
    offline.add(str(home / "wandb" / summary_record.split("/wandb/")[-1].split("/")[0]))
    (hint,) = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("wandb sync ")]
    expanded = {path for pattern in shlex.split(hint)[2:] for path in glob.glob(pattern)}
    assert expanded == offline
    assert f"results: {home}/leaderboard.csv" in proc.stdout
