"""Readers: fake scalerl run directories, points CSVs, and W&B through a fake API object."""
import math

import numpy as np
import pandas as pd
import pytest

from analysis import io, points_csv, writing


def test_read_sweep_finds_nested_runs_and_skips_a_partial_last_line(sweep):
    points = io.read_sweep(sweep)
    sizes = points.groupby("run").size().to_dict()
    assert sizes == {"0_cispo-s0": 41, "cispo-s1": 41, "0_dapo-s0": 41, "dapo-s1": 41,
                     "grpo-s0": 1, "short": 3}
    assert points["compute"].max() == pytest.approx(4 * 2500.0 * 1e12)


def test_read_sweep_takes_axes_arm_seed_status_from_summary(sweep):
    runs = io.read_sweep(sweep).groupby("run").first()
    assert runs.loc["cispo-s1", "loss"] == "cispo" and runs.loc["cispo-s1", "aggregation"] == "prompt"
    assert runs.loc["cispo-s1", "arm"] == "arm-cispo" and runs.loc["cispo-s1", "seed"] == 1
    assert runs.loc["cispo-s1", "loss_clamp"] == "sg(min(ratio, 4.0))"
    assert runs.loc["cispo-s1", "batch_prompts"] == 48 and runs.loc["cispo-s1", "batch_generations"] == 16
    assert runs.loc["grpo-s0", "run_status"] == "failed"
    assert runs.loc["grpo-s0", "error"] == "CUDA out of memory"


def test_axes_fall_back_to_config_names_without_summary(make_run, tmp_path):
    make_run("r", compute=[0.0, 1.0], reward=[0.1, None], loss="gspo", summary=False)
    points = io.read_sweep(tmp_path)
    row = points.iloc[0]
    assert row["run"] == "r" and row["loss"] == "gspo" and row["adv_norm"] == "batch"
    assert row["precision"] == "fp32_head" and row["batch"] == "b768"
    assert math.isnan(points["reward"].iloc[1])          # null pass_rate -> NaN
    assert pd.isna(row["run_status"]) and pd.isna(row["arm"])


def test_axis_option_selects_the_x_column(make_run, tmp_path):
    make_run("r", compute=[0.0, 2e12], reward=[0.1, 0.2])
    assert io.read_sweep(tmp_path, axis="device_hours")["compute"].tolist() == [0.0, 2.0]
    assert io.read_sweep(tmp_path, axis="tokens")["compute"].tolist() == [0.0, 2e6]
    with pytest.raises(ValueError, match="axis"):
        io.read_sweep(tmp_path, axis="steps")


def test_duplicate_run_names_are_kept_apart(make_run, tmp_path):
    make_run("a/x", compute=[0.0], reward=[0.1])
    make_run("b/x", compute=[0.0], reward=[0.2])
    for rel in ("a/x", "b/x"):          # both summaries claim the same run_name
        path = tmp_path / rel / "summary.json"
        path.write_text(path.read_text().replace(rel.replace("/", "_"), "same"))
    assert sorted(io.read_sweep(tmp_path)["run"]) == ["same @a/x", "same @b/x"]


def test_empty_directory_reads_as_empty_table(tmp_path):
    assert io.read_sweep(tmp_path).empty


def test_csv_reader_and_dispatch(tmp_path):
    path = tmp_path / "points.csv"
    frame = pd.DataFrame({"run": [1, 1], "compute": [0, 10], "reward": [0.1, 0.2], "loss": ["x", "x"]})
    frame.to_csv(path, index=False)
    points = points_csv.read_points(path)
    assert points["run"].tolist() == ["1", "1"] and points["loss"].tolist() == ["x", "x"]
    pd.DataFrame({"run": [1], "x": [0]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="compute"):
        points_csv.read_points_csv(tmp_path / "bad.csv")
    with pytest.raises(FileNotFoundError):
        points_csv.read_points(tmp_path / "missing.csv")


class FakeRun:
    def __init__(self, name, state, rows, loss):
        self.name, self.id, self.state = name, f"id-{name}", state
        self.config = {"loss": {"name": loss}, "seed": 0, "batch": {"name": "b", "prompts": 48}}
        self.summary = {"arm_hash": f"arm-{loss}", "loss_clamp": "sg(min(ratio, 4.0))"}
        self._rows = rows

    def scan_history(self):
        return iter(self._rows)


class FakeApi:
    """The slice of wandb.Api that read_wandb_group uses; records what it was asked for."""

    def __init__(self, runs):
        self._runs, self.calls = runs, []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        return list(self._runs)


def test_read_wandb_group_with_a_fake_api():
    rows = [{"_step": 0, "compute": 0.0, "pass_rate": 0.3}, {"_step": 5, "train_reward": 0.1},
            {"_step": 10, "compute": 1e15, "pass_rate": 0.4, "epoch": 0.5}]
    api = FakeApi([FakeRun("a", "finished", rows, "cispo"), FakeRun("a", "crashed", [], "dapo")])
    points = io.read_wandb_group("proj", "sweep-1", entity="me", api=api)
    assert api.calls == [("me/proj", {"group": "sweep-1"})]
    first = points[points["run"] == "a"]
    assert first["compute"].tolist() == [0.0, 1e15] and first["reward"].tolist() == [0.3, 0.4]
    assert first["loss"].iloc[0] == "cispo" and first["run_status"].iloc[0] == "done"
    assert first["arm"].iloc[0] == "arm-cispo" and first["batch_prompts"].iloc[0] == 48
    second = points[points["run"] == "a-id-a"]               # duplicate name gets the id
    assert second["run_status"].iloc[0] == "failed" and np.isnan(second["reward"].iloc[0])


def test_safe_name():
    assert writing.safe_name("loss=cispo/seed 1") == "loss_cispo_seed_1"
