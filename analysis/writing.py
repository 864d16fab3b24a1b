"""Writing the analysis's results: every file goes through a temporary next to it, renamed over
the result, so a crash or a full disk never leaves half a leaderboard or half a figure."""
from __future__ import annotations

import os
from pathlib import Path


def atomic(path, write):
    """Write through a temporary next to `path`, then rename it over `path`; never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_csv(table, path):
    return atomic(path, lambda tmp: table.to_csv(tmp, index=False))


def save_figure(fig, path, dpi=130):
    return atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", facecolor="white",
                                                 format=Path(path).suffix.lstrip(".") or "png"))


def safe_name(text, limit=80):
    """A file-name-safe version of a run name."""
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))
    return keep.strip("._")[:limit] or "run"

