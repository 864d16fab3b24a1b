"""The crash tests' one seam (scalerl/launch/faults.py): each point wraps a call the run makes
anyway, only when SCALERL_FAILPOINT names it, and kills the process at exactly that instant.
tests/test_faults.py kills real runs and sweeps at these points through the entry point; here each
point is checked alone, in a small process, against the files it leaves."""
from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO

from scalerl.core.jsonio import JsonlFile, encode_row, write_json_atomic
from scalerl.launch import faults

KILLED = -signal.SIGKILL


def named(fn) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is not p.VAR_KEYWORD}


@pytest.mark.parametrize("point", list(faults.POINTS))
def test_every_point_reads_arguments_its_function_has(point):
    # A renamed function or argument fails here, not as a crash test that no longer crashes.
    seam = faults.POINTS[point]
    _, _, fn = faults.resolve(seam.target)
    assert named(seam.at) <= named(fn), (seam.target, named(seam.at), named(fn))
    assert seam.act is None or named(seam.act) <= named(fn)
    assert seam.when in ("before", "after") and (seam.act is None or seam.when == "before")


def test_unset_wraps_nothing():
    append, replace, write = JsonlFile.append, os.replace, write_json_atomic
    faults.arm({})
    assert (JsonlFile.append, os.replace, faults.resolve("scalerl.core.jsonio:write_json_atomic")[2]) == (
        append, replace, write)


@pytest.mark.parametrize("spec", ["nope@1", "metrics.append@x", "metrics.nope@2", "checkpoint.saved@-1"])
def test_a_spec_that_names_no_point_is_refused(spec):
    with pytest.raises(ValueError, match="not a crash point"):
        faults.parse(spec)


def test_a_spec_names_its_point_and_step():
    assert faults.parse("metrics.torn@3")[:2] == ("metrics.torn", 3)
    assert faults.parse("steps.appended@12")[2] is faults.POINTS["<file>.appended"]
    assert faults.parse("run.finished")[:2] == ("run.finished", None)


# What each case does, in order, in a process armed with its point; `write_json_atomic` is imported
# by name before arming, as the launch modules do.
SCRIPT = """
import os, sys
from pathlib import Path
from scalerl.core.jsonio import JsonlFile, write_json_atomic
from scalerl.launch import faults
faults.arm(); faults.arm()  # idempotent: one wrapper
d = Path(sys.argv[1]); (d / "checkpoints").mkdir()
steps, metrics = JsonlFile(d / "steps.jsonl"), JsonlFile(d / "metrics.jsonl")
def ckpt(step):
    tmp = d / "checkpoints" / f".step_{step:08d}.pt.tmp"
    tmp.write_text(str(step))
    os.replace(tmp, d / "checkpoints" / f"step_{step:08d}.pt")
for step in range(5):
    steps.append({"step": step})
    metrics.append({"step": step})
    ckpt(step)
write_json_atomic(d / "summary.json", {"status": "failed"})
write_json_atomic(d / "summary.json", {"status": "done"})
print("survived")
"""


def run_armed(spec: str | None, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(faults.ENV, None)
    if spec:
        env[faults.ENV] = spec
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)


def rows(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def state(d) -> dict:
    return {"steps": rows(d / "steps.jsonl"), "metrics": rows(d / "metrics.jsonl"),
            "ckpts": sorted(p.name for p in (d / "checkpoints").iterdir()),
            "summary": json.loads((d / "summary.json").read_text())["status"] if (d / "summary.json").exists() else None}


def saved(*steps, tmp=None) -> list[str]:
    return sorted([f"step_{s:08d}.pt" for s in steps] + ([f".step_{tmp:08d}.pt.tmp"] if tmp is not None else []))


CASES = {  # point -> what is on disk when it dies (each step: steps row, metrics row, checkpoint)
    "steps.append@2": {"steps": [0, 1], "metrics": [0, 1], "ckpts": saved(0, 1), "summary": None},
    "steps.appended@2": {"steps": [0, 1, 2], "metrics": [0, 1], "ckpts": saved(0, 1), "summary": None},
    "eval@2": {"steps": [0, 1, 2], "metrics": [0, 1], "ckpts": saved(0, 1), "summary": None},
    "metrics.append@2": {"steps": [0, 1, 2], "metrics": [0, 1], "ckpts": saved(0, 1), "summary": None},
    "metrics.appended@2": {"steps": [0, 1, 2], "metrics": [0, 1, 2], "ckpts": saved(0, 1), "summary": None},
    "checkpoint.written@2": {"steps": [0, 1, 2], "metrics": [0, 1, 2], "ckpts": saved(0, 1, tmp=2), "summary": None},
    "checkpoint.saved@2": {"steps": [0, 1, 2], "metrics": [0, 1, 2], "ckpts": saved(0, 1, 2), "summary": None},
    "run.finished": {"steps": [0, 1, 2, 3, 4], "metrics": [0, 1, 2, 3, 4], "ckpts": saved(0, 1, 2, 3, 4),
                     "summary": "failed"},  # a failed summary is no finished run's
}


@pytest.mark.parametrize("spec", list(CASES))
def test_each_point_kills_at_its_instant(spec, tmp_path):
    proc = run_armed(spec, tmp_path)
    assert proc.returncode == KILLED, proc.stdout + proc.stderr
    assert state(tmp_path) == CASES[spec]


def test_a_torn_row_leaves_half_of_it(tmp_path):
    proc = run_armed("metrics.torn@3", tmp_path)
    assert proc.returncode == KILLED, proc.stderr
    whole = "".join(encode_row({"step": s}).decode() for s in range(3))
    half = encode_row({"step": 3})[: len(encode_row({"step": 3})) // 2].decode()
    assert (tmp_path / "metrics.jsonl").read_text() == whole + half
    assert rows(tmp_path / "steps.jsonl") == [0, 1, 2, 3]


@pytest.mark.parametrize("spec", [None, "steps.append@9", "sweep.leaderboard"])
def test_a_point_never_reached_or_none_kills_nothing(spec, tmp_path):
    proc = run_armed(spec, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "survived", proc.stderr
    assert state(tmp_path)["summary"] == "done"
