"""Choosing the metric column to fit: one curve per task of a mix run (`--metric`)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import io, points_csv
from analysis.cli import main


def write_mix_run(root, name, arm="a1"):
    d = root / name
    d.mkdir(parents=True)
    rows = [{"step": s, "compute": 1e12 * s, "pass_rate": 0.3 + 0.01 * s, "pass_rate/math": 0.4 + 0.02 * s,
             "pass_rate/code": 0.1 + 0.005 * s, "response_length/code": 50} for s in range(8)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"status": "done", "run_name": name, "arm_hash": arm, "axes": {"task": "mix"}}))


def test_a_pattern_gives_one_curve_per_task_each_its_own_arm(tmp_path):
    write_mix_run(tmp_path, "r1")
    points = io.read_sweep(tmp_path, metrics=("pass_rate/*",))
    assert sorted(points["run"].unique()) == ["r1 [pass_rate/code]", "r1 [pass_rate/math]"]
    math = points[points["metric"] == "pass_rate/math"].sort_values("compute")
    assert math["reward"].tolist() == pytest.approx([0.4 + 0.02 * s for s in range(8)])
    assert set(points["arm"]) == {"a1|pass_rate/code", "a1|pass_rate/math"}  # seeds pool per task, never across
    default = io.read_sweep(tmp_path)
    assert default["run"].unique().tolist() == ["r1"] and "metric" not in default.columns
    assert default["reward"].tolist() == pytest.approx([0.3 + 0.01 * s for s in range(8)])


def test_cli_metric_flag_fits_the_chosen_columns(tmp_path):
    write_mix_run(tmp_path / "sweep", "r1")
    main(["fit", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--metric", "pass_rate/math", "--metric",
          "pass_rate/code", "--n-boot", "0", "--plots", "none", "--quiet"])
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert sorted(board["metric"]) == ["pass_rate/code", "pass_rate/math"]
    assert (board["R0"].sort_values().tolist() == pytest.approx([0.1, 0.4]))


def test_csv_metric_column_and_errors(tmp_path):
    csv = tmp_path / "points.csv"
    pd.DataFrame({"run": ["a"] * 3, "compute": [0, 1, 2], "reward": [0.1, 0.2, 0.3], "pass_rate/code": [0.5, 0.6, 0.7]}).to_csv(csv, index=False)
    assert points_csv.read_points(csv, metrics=("pass_rate/code",))["reward"].tolist() == [0.5, 0.6, 0.7]
    with pytest.raises(ValueError, match="pass_rate/math"):
        points_csv.read_points(csv, metrics=("pass_rate/math",))
    with pytest.raises(ValueError, match="single column"):
        points_csv.read_points(csv, metrics=("pass_rate/*",))
