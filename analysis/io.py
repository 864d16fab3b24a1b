"""All reading and writing of the analysis package, and nothing else.

Readers turn a source into the tidy points table of `analysis.runs`:
    read_sweep(dir)         a scalerl sweep: any directory holding metrics.jsonl (or a
                            summary.json) is a run, at any depth (Hydra nests one level)
    read_points_csv(file)   run,compute,reward[,r0,seed,<axis>...]
    read_wandb_group(...)   a W&B group through the public API (needs network)
Writers: `write_csv`, `save_figure`.  The trainer's run-directory contract:
    config.yaml    resolved config; each axis is a node with a `name`; recipe, seed,
                   batch.prompts, batch.generations
    metrics.jsonl  one eval per line: step, compute, device_hours, tokens, epoch,
                   pass_rate (= reward); a killed run may leave a partial last line
    summary.json   status, run_name, arm_hash, axes, seed, loss_clamp, error (may be absent)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

AXES = ("compute", "device_hours", "tokens")       # x-axes the trainer logs
REWARD_KEY = "pass_rate"
WANDB_STATES = {"finished": "done", "running": "running", "failed": "failed",
                "crashed": "failed", "killed": "failed", "preempted": "preempted"}


# ---------------------------------------------------------------- scalerl sweep directories
def find_run_dirs(root):
    """Directories under (or equal to) `root` holding metrics.jsonl or summary.json."""
    root = Path(root)
    found = {p.parent for name in ("metrics.jsonl", "summary.json") for p in root.rglob(name)}
    return sorted(found)


def read_metrics(path):
    """Eval records from a metrics.jsonl; unparseable lines (a killed run's last) are skipped."""
    records = []
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return records
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _read_mapping(path, loader):
    try:
        data = loader(Path(path).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def run_axes(config, summary):
    """Axis columns: summary.json's `axes`, else every config node with a `name` field.

    Adds recipe, batch_prompts and batch_generations from the config when present.
    """
    if isinstance(summary.get("axes"), dict) and summary["axes"]:
        axes = {str(k): v for k, v in summary["axes"].items()}
    else:
        axes = {k: v["name"] for k, v in config.items() if isinstance(v, dict) and "name" in v}
    if "recipe" in config and "recipe" not in axes:
        axes["recipe"] = config["recipe"]
    batch = config.get("batch") if isinstance(config.get("batch"), dict) else {}
    for key in ("prompts", "generations"):
        if key in batch:
            axes[f"batch_{key}"] = batch[key]
    return axes


def _number(value):
    """float(value), or nan for None, strings and other non-numbers."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _frame(records, meta, *, axis, reward_key):
    """Tidy points from eval records (one NaN row when there are none) plus per-run columns."""
    def value(record, key):
        if key == "step" and "step" not in record:      # W&B history has its own _step
            key = "_step"
        return _number(record.get(key))

    columns = {"compute": axis, "reward": reward_key, "step": "step", "epoch": "epoch"}
    frame = pd.DataFrame({col: [value(r, key) for r in records] or [math.nan]
                          for col, key in columns.items()})
    for key, value in meta.items():
        frame[key] = value
    return frame


def read_run(run_dir, *, name=None, axis="compute"):
    """Tidy points of one run directory (one NaN row if it has no evals)."""
    run_dir = Path(run_dir)
    summary = _read_mapping(run_dir / "summary.json", json.loads)
    config = _read_mapping(run_dir / "config.yaml", yaml.safe_load)
    records = read_metrics(run_dir / "metrics.jsonl")
    meta = {
        "run": summary.get("run_name") or name or run_dir.name,
        "seed": summary.get("seed", config.get("seed")),
        "arm": summary.get("arm_hash"),
        "run_status": summary.get("status"),
        "loss_clamp": summary.get("loss_clamp"),
        "error": summary.get("error"),
        "run_dir": str(run_dir),
        **run_axes(config, summary),
    }
    return _frame(records, meta, axis=axis, reward_key=REWARD_KEY)


def read_stop_records(points):
    """{run: record} for the runs a sweep stopped early: summary.json's `early_stop`, else a
    pending stop.json (the run had not yet seen it).  Runs without a run_dir are skipped."""
    if "run_dir" not in getattr(points, "columns", ()):
        return {}
    records = {}
    for run, run_dir in points.groupby("run", sort=False)["run_dir"].first().items():
        if not isinstance(run_dir, str):
            continue
        summary = _read_mapping(Path(run_dir) / "summary.json", json.loads)
        record = summary.get("early_stop") or _read_mapping(Path(run_dir) / "stop.json", json.loads)
        if isinstance(record, dict) and record:
            records[run] = record
    return records


def read_sweep(path, *, axis="compute"):
    """Tidy points of every run under a sweep directory; names default to relative paths."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    root = Path(path)
    frames = []
    for run_dir in find_run_dirs(root):
        rel = run_dir.relative_to(root).as_posix()
        frames.append(read_run(run_dir, name=rel if rel != "." else root.name, axis=axis))
    if not frames:
        return pd.DataFrame(columns=["run", "compute", "reward"])
    points = pd.concat(frames, ignore_index=True)
    names = points.groupby("run_dir", sort=False)["run"].first()
    if names.duplicated().any():           # two runs claim one run_name: keep them apart
        points["run"] = points["run"] + " @" + points["run_dir"].map(
            lambda d: Path(d).relative_to(root).as_posix())
    return points


# ---------------------------------------------------------------- CSV
def read_points_csv(path):
    """A tidy CSV with at least run,compute,reward (optional r0, seed, and axis columns)."""
    points = pd.read_csv(path)
    missing = [c for c in ("run", "compute", "reward") if c not in points.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; need run,compute,reward")
    points["run"] = points["run"].astype(str)
    return points


def read_points(path, *, axis="compute"):
    """Sweep directory or points CSV, whichever `path` is."""
    path = Path(path)
    if path.is_dir():
        return read_sweep(path, axis=axis)
    if path.is_file():
        return read_points_csv(path)
    raise FileNotFoundError(f"{path}: neither a sweep directory nor a points CSV")


# ---------------------------------------------------------------- W&B
def read_wandb_group(project, group, *, entity=None, api=None, axis="compute", reward_key=REWARD_KEY):
    """Tidy points of every run in a W&B group, through the public API.

    Needs network and a W&B login, so it cannot run in offline tests: they pass a fake
    `api` with the same surface (api.runs(path, filters=...) yielding runs with .name,
    .id, .config, .summary, .state and .scan_history()).  Nothing else here is mocked.
    """
    if api is None:
        import wandb              # lazy: reading disk must not need wandb
        api = wandb.Api()
    path = f"{entity}/{project}" if entity else project
    frames, seen = [], set()
    for run in api.runs(path, filters={"group": group}):
        config, summary = dict(run.config or {}), dict(run.summary or {})
        rows = [r for r in run.scan_history() if reward_key in r]
        name = run.name if run.name not in seen else f"{run.name}-{run.id}"
        seen.add(name)
        meta = {"run": name, "seed": config.get("seed"),
                "arm": summary.get("arm_hash", config.get("arm_hash")),
                "run_status": WANDB_STATES.get(str(run.state), str(run.state)),
                "loss_clamp": summary.get("loss_clamp"), **run_axes(config, summary)}
        frames.append(_frame(rows, meta, axis=axis, reward_key=reward_key))
    if not frames:
        return pd.DataFrame(columns=["run", "compute", "reward"])
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- writing
def write_csv(table, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def save_figure(fig, path, dpi=130):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", facecolor="white")
    return path


def safe_name(text, limit=80):
    """A file-name-safe version of a run name."""
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))
    return keep.strip("._")[:limit] or "run"

