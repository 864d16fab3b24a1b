"""A run directory someone sends you cannot run code when it resumes (issue 27 point 1), and a
relaunch whose checkpoints are all refused stops instead of wiping its rows (issue 29 point 6).

The payload of every crafted file writes a marker file: if it ever runs, the test sees it."""
from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from scalerl.train.checkpoint import CheckpointsRefused
from scalerl.train.loop import train
from scalerl.train.sharded_checkpoint import _MetadataUnpickler, _safe_reader


class _Payload:
    """Unpickling this runs ``os.system(touch marker)``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant_metadata(run_dir: Path, marker: Path, step: int = 99) -> Path:
    """``checkpoints/step_XXXXXXXX/{.metadata, extra.json}`` whose metadata runs the payload."""
    d = run_dir / "checkpoints" / f"step_{step:08d}"
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    (d / "extra.json").write_text("{}")
    return d


def run(cfg, run_dir: Path) -> dict:
    return train(cfg, run_dir, run_name=run_dir.name, group="test", config_dict={})


def test_dcp_metadata_loads_its_own_records_and_refuses_anything_else(tmp_path):
    import torch.distributed.checkpoint as dcp

    model = torch.nn.Linear(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(tmp_path / "good"))
        back = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
        dcp.load(back, storage_reader=_safe_reader(tmp_path / "good"))
    assert all(torch.equal(back["model"][k], v) for k, v in model.state_dict().items())

    marker = tmp_path / "ran"
    bad = plant_metadata(tmp_path, marker)
    with open(bad / ".metadata", "rb") as f, pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        _MetadataUnpickler(f).load()
    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        _safe_reader(bad).read_metadata()
    assert not marker.exists()


@pytest.mark.slow
def test_a_crafted_metadata_is_refused_and_the_run_falls_back_and_finishes(tiny_cfg, tmp_path):
    run_dir, marker = tmp_path / "r", tmp_path / "ran"
    assert run(tiny_cfg("train.steps=2", "train.eval_every=1"), run_dir)["status"] == "done"
    plant_metadata(run_dir, marker)  # newer than every real checkpoint
    cfg = tiny_cfg("train.steps=3", "train.eval_every=1")
    assert run(cfg, run_dir)["status"] == "done"
    assert not marker.exists()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # resumed from step 2: none lost, none twice


@pytest.mark.slow
def test_every_checkpoint_refused_stops_and_keeps_every_row(tiny_cfg, tmp_path):
    run_dir, marker = tmp_path / "r", tmp_path / "ran"
    cfg = tiny_cfg("train.steps=2", "train.eval_every=1")
    assert run(cfg, run_dir)["status"] == "done"
    rows_before = (run_dir / "metrics.jsonl").read_bytes()
    for pt in (run_dir / "checkpoints").glob("step_*.pt"):
        torch.save({"model": _Payload(marker)}, pt)  # weights_only refuses it
    plant_metadata(run_dir, marker)
    with pytest.raises(CheckpointsRefused, match="every checkpoint in .* was refused.*restore a good checkpoint"):
        run(cfg, run_dir)
    assert not marker.exists()
    assert (run_dir / "metrics.jsonl").read_bytes() == rows_before


@pytest.mark.slow
def test_a_crafted_metadata_on_a_two_rank_run_runs_on_neither_rank(tmp_path):
    """Both ranks read DCP metadata: on a real 2-rank torchrun run, the planted one is refused on
    both and the run resumes from its newest real (sharded) checkpoint."""
    from helpers import TINY_RUN, torchrun

    run_dir, marker = tmp_path / "two", tmp_path / "ran"
    torchrun([*TINY_RUN, "train.steps=2", "train.eval_every=1"], run_dir)
    assert (run_dir / "checkpoints" / "step_00000002" / ".metadata").exists()
    plant_metadata(run_dir, marker)
    (run_dir / "summary.json").unlink()  # finished: a relaunch with more steps goes on from step 2
    out = torchrun([*TINY_RUN, "train.steps=3", "train.eval_every=1"], run_dir)
    assert "step_00000099" in out.stdout + out.stderr and "resuming" in out.stdout + out.stderr
    assert not marker.exists()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
