"""Local dataset files and the fixed held-out split.

scalerl never downloads data: ``task.path`` is a local ``.jsonl``, ``.json`` (a list of
records) or ``.parquet`` file. The held-out split is a seeded draw of distinct problems,
fixed by ``task.data_seed`` and the file alone (not the run seed), so every arm of a sweep
evaluates on the same prompts; the run also records it (``heldout.json``, see
``scalerl/train/heldout.py``) so a resume can check that nothing moved.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from scalerl.core.errors import ConfigError, check

FORMATS = (".jsonl", ".json", ".parquet")


def check_path(path: str, key: str = "task.path") -> None:
    """Fail at config time (before a sweep launches) on a missing or unknown file."""
    check(bool(path), key, "must name a local .jsonl, .json or .parquet file")
    p = Path(path).expanduser()
    check(p.suffix in FORMATS, key, f"{path!r}: unknown format {p.suffix!r}; use one of {FORMATS}")
    check(p.is_file(), key, f"{path!r}: no such file (relative paths are relative to the launch directory)")


def read_records(path: str, key: str = "task.path") -> list[dict]:
    """The rows of a local JSONL, JSON or Parquet file, as dicts."""
    p = Path(path).expanduser()
    check_path(path, key)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq  # heavy; only when a Parquet file is read

        return pq.read_table(p).to_pylist()
    try:
        if p.suffix == ".json":
            try:
                rows = json.loads(p.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                raise
            except ValueError as e:
                raise ConfigError(key, f"{path!r} is not JSON: {e}") from None
            check(isinstance(rows, list), key, f"{path!r}: a .json file must hold a list of records")
            return rows
        rows = []
        with open(p, encoding="utf-8") as f:  # JSON is UTF-8 (RFC 8259), whatever the machine's locale
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as e:
                        raise ConfigError(key, f"{path!r} line {n} is not JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(key, f"{path!r} is not UTF-8 text ({e.reason} at byte {e.start}); JSON files are UTF-8") from None
    for n, row in enumerate(rows):
        check(isinstance(row, dict), key, f"{path!r} record {n} is a {type(row).__name__}, not an object with fields")
    return rows


def field(row: dict, name: str, key: str, where: str):
    """``row[name]``, or a ConfigError naming the config key that chose the field."""
    if name not in row:
        raise ConfigError(key, f"{where} has no field {name!r}; its fields are {sorted(row)}")
    return row[name]


def split(n: int, n_heldout: int, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) row indices: a seeded permutation, held-out first.

    The held-out set is capped at half the rows so the train pool is never empty.

    >>> split(10, 3, 0) == split(10, 3, 0)
    True
    >>> train, held = split(10, 1000, 0); len(held), len(train), sorted(train + held) == list(range(10))
    (5, 5, True)
    """
    order = list(range(n))
    random.Random(seed).shuffle(order)
    k = min(n_heldout, n // 2)
    return sorted(order[k:]), order[:k]


def fingerprint(*parts) -> str:
    """A short content hash of a problem (its source text and what grades it)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
