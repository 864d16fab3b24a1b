"""Everything ``--dry-run`` can know, it checks: the sandbox's isolation, a task file's encoding
and fields, and ``model=hf``'s config.json as transformers reads it. Each is refused in one line
naming the key, exit 2, at ``--dry-run`` and again before a run starts (no run directory left);
before, each passed ``--dry-run`` and failed with a traceback after a generator had started."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import cli
from taskdata import MATH_ROWS, deepcoder_rows, write_jsonl

CODE = ["task=code", "model.warmstart.enabled=false", "train.steps=1", "logger=none"]


def refused(args, out_root: Path, key: str, why: str, env=None) -> None:
    """``args`` refused at --dry-run and in a single run: one line naming ``key``, exit 2, nothing made."""
    for mode in (["-m", "--dry-run"], []):
        proc = cli([*mode, *args], out_root, check=False, extra_env=env)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, (mode, proc.stdout[-2000:], proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert lines[-1].startswith(f"[scalerl] config error: {key}:") and why in lines[-1], lines
        if not mode:
            assert len(lines) == 1, lines
            assert not out_root.exists() or not any(out_root.rglob("*.jsonl")), sorted(out_root.rglob("*"))
            assert not any(out_root.rglob("progress.json")), sorted(out_root.rglob("*"))


def test_task_code_without_bubblewrap_is_refused_under_isolation_auto(tmp_path):
    data = write_jsonl(tmp_path / "code.jsonl", deepcoder_rows())
    no_bwrap = {"PATH": os.path.dirname(sys.executable)}  # bubblewrap is looked up on PATH
    refused([*CODE, f"task.path={data}"], tmp_path / "out", "task.sandbox.isolation",
            "bubblewrap is unavailable (bubblewrap (bwrap) is not installed)", env=no_bwrap)


def test_isolation_process_without_its_consent_is_refused(tmp_path):
    data = write_jsonl(tmp_path / "code.jsonl", deepcoder_rows())
    refused([*CODE, f"task.path={data}", "task.sandbox.isolation=process"], tmp_path / "out",
            "task.sandbox.isolation", "set task.sandbox.unsafe_process_isolation=true")


@pytest.mark.parametrize("config,why", [
    ("{not json", "is not a readable JSON file"),
    ('{"model_type": "llama", "vocab_size": "x", "hidden_size": 64}', "vocab_size"),
])
def test_a_model_config_json_that_transformers_cannot_read_is_refused(tmp_path, config, why):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(config)
    refused(["model=hf", f"model.path={tmp_path / 'model'}", "train.steps=1", "logger=none"], tmp_path / "out",
            "model.path", why)


def test_a_math_file_that_is_not_utf8_is_refused(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in MATH_ROWS) + b'{"problem": "\xff\xfe", "answer": "1"}\n')
    refused(["task=math", f"task.path={data}", "train.steps=1", "logger=none"], tmp_path / "out",
            "task.path", "is not UTF-8 text (invalid start byte at byte")


def test_a_math_file_without_the_configured_field_is_refused(tmp_path):
    data = write_jsonl(tmp_path / "math.jsonl", [{"question": r["problem"], "answer": r["answer"]} for r in MATH_ROWS])
    refused(["task=math", f"task.path={data}", "train.steps=1", "logger=none"], tmp_path / "out",
            "task.problem_field", "has no field 'problem'")
