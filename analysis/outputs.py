"""Result files are never overwritten silently.

An analysis writes a known set of files into its output directory (leaderboard.csv and
the PNGs; extrapolation.csv and .png; plan.csv and .png) and records, in `analysis.json`, which runs and
which settings produced them.  Before the next analysis writes there:
* same runs, same settings (a rerun, or a sweep relaunched to finish its arms): the files
  are replaced, and the console says so;
* anything else (other runs, other settings, or files with no record): the old files move
  to `previous/<time>/` first, and the console says where.
So a 20-step sweep can never silently replace the leaderboard of a 1000-step one.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

MANIFEST = "analysis.json"
KINDS = {
    "fit": ("leaderboard.csv", "overview.png", "params.png", "run-*.png", "report.html"),
    "extrapolate": ("extrapolation.csv", "extrapolation.png"),
    "plan": ("plan.csv", "plan.png"),
}


def _manifest(out: Path) -> dict:
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _existing(out: Path, kind: str) -> list[Path]:
    return sorted({p for pattern in KINDS[kind] for p in out.glob(pattern) if p.is_file()})


def claim(out_dir, kind: str, runs: list[str], settings: dict, *, quiet: bool = False) -> Path | None:
    """Make room for a new `kind` analysis of `runs` with `settings` in `out_dir`.

    Returns the folder the previous files moved to, or None when nothing moved.
    """
    out = Path(out_dir)
    existing = _existing(out, kind)
    if not existing:
        return None
    record = _manifest(out).get(kind) or {}
    same_runs = record.get("runs") == sorted(runs)
    if same_runs and record.get("settings") == _plain(settings):
        if not quiet:
            print(f"replacing the {kind} results in {out} (same {len(runs)} runs, same settings)")
        return None
    why = ("no record of which runs they cover" if not record else
           f"they cover {len(record.get('runs', []))} other run(s)" if not same_runs else "other settings")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = out / "previous" / f"{kind}-{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = out / "previous" / f"{kind}-{stamp}-{n}"
    dest.mkdir(parents=True)
    for path in existing:
        os.replace(path, dest / path.name)
    if record:
        (dest / MANIFEST).write_text(json.dumps({kind: record}, indent=1))
    if not quiet:
        print(f"the previous {kind} results in {out} ({why}) were moved to {dest}")
    return dest


def record(out_dir, kind: str, runs: list[str], settings: dict, files) -> None:
    """Note which runs and settings produced `kind`'s files (atomically)."""
    out = Path(out_dir)
    data = _manifest(out)
    data[kind] = {"runs": sorted(runs), "settings": _plain(settings), "files": sorted(str(Path(f).name) for f in files),
                  "written_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, out / MANIFEST)


def run_ids(points) -> list[str]:
    """What identifies the analysed runs in analysis.json: run directories, else run names."""
    if "run_dir" in points.columns and points["run_dir"].notna().all():
        return sorted({str(Path(d).resolve()) for d in points["run_dir"]})
    return sorted(set(points["run"].astype(str))) if "run" in points.columns else []


def _plain(settings: dict) -> dict:
    """Settings as JSON would give them back (tuples -> lists, numbers unchanged)."""
    return json.loads(json.dumps(settings, default=str))
