"""The run directory's records under damage: strict metrics rows, writes that fail on a
full disk (simulated with a file-size limit: the write fails with EFBIG exactly where a
full disk fails with ENOSPC), and checkpoints that load with weights_only=True."""
from __future__ import annotations

import json
import resource
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from scalerl.core.jsonio import JsonlFile, write_json_atomic
from scalerl.train.checkpoint import list_checkpoints, save_checkpoint
from scalerl.train.sharded_checkpoint import resume


@contextmanager
def file_size_limit(nbytes: int):
    """Writes past ``nbytes`` in any one file fail with EFBIG in this process, as on a full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills us instead of failing the write
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def write_lines(path: Path, *lines: str) -> JsonlFile:
    path.write_text("".join(lines))
    return JsonlFile(path)


# ---------------------------------------------------------------- metrics.jsonl
def test_a_partial_last_line_is_ignored(tmp_path):
    f = write_lines(tmp_path / "metrics.jsonl", '{"step": 0}\n', '{"step": 5}\n', '{"step": 10, "pass')
    assert [r["step"] for r in f.rows()] == [0, 5]


def test_a_corrupt_middle_row_is_an_error_naming_file_and_line(tmp_path):
    f = write_lines(tmp_path / "metrics.jsonl", '{"step": 0}\n', '{"step": 5, "pass\n', '{"step": 10}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl line 2: not a JSON row"):
        f.rows()
    with pytest.raises(ValueError, match="line 2"):  # a resume refuses it instead of dropping the row
        f.truncate_after(10)
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3  # nothing was rewritten


def test_a_row_out_of_order_is_refused_naming_the_line(tmp_path):
    f = write_lines(tmp_path / "metrics.jsonl", '{"step": 0}\n', '{"step": 10}\n', '{"step": 5}\n')
    with pytest.raises(ValueError, match=r"line 3: step 5 after step 10"):
        f.rows()
    f = write_lines(tmp_path / "steps.jsonl", '{"step": 1}\n', '{"step": 1}\n')
    with pytest.raises(ValueError, match=r"line 2: step 1 after step 1"):
        f.rows()


def test_a_failed_append_leaves_the_file_as_it_was_and_names_it(tmp_path):
    f = JsonlFile(tmp_path / "metrics.jsonl")
    f.append({"step": 0, "pass_rate": 0.25})
    before = f.path.read_bytes()
    with file_size_limit(len(before) + 10), pytest.raises(OSError, match=r"could not append to .*metrics.jsonl"):
        f.append({"step": 5, "pass_rate": 0.5, "padding": "x" * 200})
    assert f.path.read_bytes() == before  # no half row for the next append to glue onto
    f.append({"step": 5, "pass_rate": 0.5})
    assert [r["step"] for r in f.rows()] == [0, 5]


def test_a_failed_json_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"status": "done"})
    with file_size_limit(64), pytest.raises(OSError, match=r"could not write .*summary.json: File too large"):
        write_json_atomic(path, {"status": "failed", "error": "x" * 500})
    assert json.loads(path.read_text()) == {"status": "done"}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# ---------------------------------------------------------------- checkpoints
def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(64, 64)


def test_a_failed_checkpoint_names_the_file_and_cleans_its_temporary(tmp_path):
    model = tiny_model()
    save_checkpoint(tmp_path, 0, {"model": model.state_dict()}, model=model)
    with file_size_limit(4096), pytest.raises(OSError) as e:  # torch's own error is a RuntimeError naming no file
        save_checkpoint(tmp_path, 5, {"model": model.state_dict()}, model=model)
    assert str(e.value) == (f"could not write checkpoint {tmp_path / 'checkpoints' / 'step_00000005.pt'}: "
                            "File too large (EFBIG)")
    assert e.value.__suppress_context__  # one line, not a chain of torch internals
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000000.pt"]


class Exploit:
    """What a crafted checkpoint holds: unpickling it runs a command (here: writes a file)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


def test_a_checkpoint_that_would_run_code_is_refused_and_the_previous_one_used(tmp_path):
    from types import SimpleNamespace

    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    sampler = SimpleNamespace(state=None, load_state_dict=lambda sd: setattr(sampler, "state", sd))
    good = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "sampler": {"drawn": 3}, "state": {"step": 0}}
    save_checkpoint(tmp_path, 0, good, model=model)
    marker = tmp_path / "pwned"
    evil = tmp_path / "checkpoints" / "step_00000005.pt"
    torch.save({**good, "state": {"step": 5}, "x": Exploit(marker)}, evil)
    logged = []
    r = SimpleNamespace(model=model, optimizer=opt, scheduler=sched, sampler=sampler, sharded=False)
    extra = resume(tmp_path, r, log=logged.append)  # the one resume path the loop takes
    assert not marker.exists()  # the old loader (weights_only=False) ran it
    assert extra["state"]["step"] == 0 and sampler.state == {"drawn": 3}
    assert "step_00000005.pt" in logged[0] and "could run code" in logged[0]


def test_what_the_loop_saves_loads_with_weights_only(tmp_path):
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(2, 64)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    # numpy scalars reach the window of per-step stats through .item()-less code paths
    state = {"step": 3, "compute": np.float64(1.5e9), "tokens": np.int64(7), "wandb_id": None,
             "window": [{"loss": np.float32(0.25), "clip_frac": 0.0}]}
    save_checkpoint(tmp_path, 3, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                  "scheduler": sched.state_dict(), "state": state}, model=model)
    (path,) = list_checkpoints(tmp_path)
    ck = torch.load(path, weights_only=True)
    assert ck["state"] == {"step": 3, "compute": 1.5e9, "tokens": 7, "wandb_id": None,
                           "window": [{"loss": 0.25, "clip_frac": 0.0}]}
    assert type(ck["state"]["compute"]) is float and type(ck["state"]["tokens"]) is int
    assert torch.equal(ck["model"]["weight"], model.weight)


def test_plain_refuses_what_weights_only_could_not_load():
    from scalerl.train.checkpoint import plain

    with pytest.raises(TypeError, match=r"checkpoint.state.seen: a set"):
        plain({"state": {"seen": {1, 2}}})


# ------------------------------------------- a resume through the entry point
@pytest.mark.parametrize("rows,line,why", [
    # half-written in the middle (a torn write that a later append glued onto)
    ('{"step": 0, "compute": 0.0}\n{"step": 1, "comp\n{"step": 2, "compute": 2.0}\n', 2, "not a JSON row"),
    # non-finite: the trainer writes null for one (jsonio.clean), so these came from elsewhere
    ('{"step": 0, "compute": 0.0, "pass_rate": 0.5}\n{"step": 1, "compute": Infinity, "pass_rate": 0.6}\n', 2,
     "compute is inf"),
    ('{"step": 0, "compute": 0.0, "pass_rate": NaN}\n', 1, "pass_rate is nan"),
])
def test_a_corrupt_row_stops_the_resume_in_one_line_with_exit_2_before_anything_is_written(tmp_path, rows, line, why):
    from helpers import cli

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(rows)
    proc = cli(["train.steps=2", "logger=none", f"hydra.run.dir={run}"], tmp_path, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"[scalerl] {run / 'metrics.jsonl'} line {line}: {why}"), lines
    assert (run / "metrics.jsonl").read_text() == rows  # nothing rewritten
    assert not (run / "progress.json").exists() and not (run / "config.yaml").exists()


def test_a_non_finite_value_is_refused_naming_the_key_and_line(tmp_path):
    f = write_lines(tmp_path / "metrics.jsonl", '{"step": 0, "pass_rate": 0.5}\n', '{"step": 1, "reward": -Infinity}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl line 2: reward is -inf, not a finite number or null"):
        f.rows()
    f = write_lines(tmp_path / "ok.jsonl", '{"step": 0, "pass_rate": null}\n')  # what the trainer writes for NaN
    assert f.rows() == [{"step": 0, "pass_rate": None}]
