"""Stable short hashes of plain data (configs), for run and cache names."""
from __future__ import annotations

import hashlib
import json


def stable_hash(obj, n: int = 8) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys), first n hex chars."""
    blob = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:n]
