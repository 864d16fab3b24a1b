"""The run's held-out split, recorded in its directory (``heldout.json``).

The split is a pure function of the data and ``task.data_seed``, so every arm of a
sweep already draws the same prompts. Recording it makes that checkable and protects a
resumed run: if the data file changed under it, resuming would silently measure a
different curve, so the run stops with an error instead.
"""
from __future__ import annotations

from pathlib import Path

from scalerl.core.errors import ConfigError
from scalerl.core.hashing import stable_hash
from scalerl.core.jsonio import read_json, write_json_atomic


def split_record(task) -> dict:
    problems = [[p.task, p.uid] for p in task.heldout]
    return {"fingerprint": stable_hash([problems, [p.prompt for p in task.heldout], [p.answer for p in task.heldout]], n=16),
            "n": len(problems), "problems": problems}


def pin_heldout(run_dir: Path, task, *, write: bool = True) -> dict:
    """Write the split on a run's first start; on a resume, fail if it changed."""
    path = Path(run_dir) / "heldout.json"
    record = split_record(task)
    saved = read_json(path)
    if saved is None:
        if write:
            write_json_atomic(path, record)
        return record
    if saved.get("fingerprint") != record["fingerprint"]:
        raise ConfigError("task", f"the held-out split differs from the one this run started with ({path}): the data "
                                  "file changed; restore it, or start a new run in a new directory")
    return record
