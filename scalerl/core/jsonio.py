"""JSON and JSONL files that survive a crash: the run directory's records.

JSON files (``progress.json``, ``summary.json``, ``launch.json``) are replaced
atomically, so a crash never leaves a half-written one. JSONL files
(``metrics.jsonl``, ``steps.jsonl``) are append-only with an fsync per row; on
resume they are cut back to the checkpoint's step, so no row is lost or
duplicated.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str, allow_nan=True))
    os.replace(tmp, path)


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def clean(row: dict) -> dict:
    """JSON-safe metrics: non-finite floats become null (the analysis treats them as missing)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


class JsonlFile:
    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict]:
        """Parsed rows; a partial last line (killed mid-write) is ignored."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def truncate_after(self, step: int) -> int:
        """Keep rows with ``step <= step``; returns how many were dropped."""
        rows = self.rows()
        keep = [r for r in rows if r.get("step", -1) <= step]
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        os.replace(tmp, self.path)
        return len(rows) - len(keep)

    def append(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(clean(row)) + "\n")
            f.flush()
            os.fsync(f.fileno())
