"""Points from a path: a tidy points CSV (run,compute,reward[,r0,seed,<axis>...]), or a sweep
directory handed to `analysis.io.read_sweep`; `read_points` picks by what the path is.

A CSV that is empty, ragged or binary, lacks a column, or holds a value that is not a number, a
negative compute or a reward outside [0, 1] raises `io.InputError` naming the file and the line;
it is read through `io.read_bounded`, so no file can hang the analysis or fill memory.
"""
from __future__ import annotations

import csv
import os
from io import BytesIO, StringIO
from pathlib import Path

import pandas as pd

from analysis import io


def read_points_csv(path, metric=None):
    """A tidy CSV with at least run,compute,reward (optional r0, seed, and axis columns);
    `metric` names another column to fit instead of reward.

    Raises InputError for an empty, ragged or binary file, a missing column, and a value
    that is not a number, a negative compute or a reward outside [0, 1] (naming the line).
    """
    raw = io.read_bounded(path)
    if raw is None:
        raise io.InputError(f"{path}: no such points CSV")
    if b"\x00" in raw[: 1 << 16]:
        raise io.InputError(f"{path}: not a text CSV file (binary data)")
    _check_fields(path, raw)
    try:
        points = pd.read_csv(BytesIO(raw))
    except pd.errors.EmptyDataError:
        raise io.InputError(f"{path}: empty file; need a header run,compute,reward and one row per eval") from None
    except UnicodeDecodeError:
        raise io.InputError(f"{path}: not a text CSV file") from None
    except pd.errors.ParserError as err:
        raise io.InputError(f"{path}: not a valid CSV ({str(err).strip().splitlines()[-1]})") from None
    if metric and metric != io.REWARD_KEY:
        if metric not in points.columns:
            raise io.InputError(f"{path}: no column {metric!r} (from --metric); columns: {list(points.columns)}")
        points = points.drop(columns=["reward"], errors="ignore").rename(columns={metric: "reward"})
    missing = [c for c in ("run", "compute", "reward") if c not in points.columns]
    if missing:
        raise io.InputError(f"{path}: missing column(s) {missing}; need run,compute,reward")
    if points.empty:
        raise io.InputError(f"{path}: no rows under the header")
    for column in ("compute", "reward", "r0"):
        if column not in points.columns:
            continue
        values = pd.to_numeric(points[column], errors="coerce")
        bad = values.isna() & points[column].notna()
        if bad.any():
            row = int(bad.idxmax())
            raise io.InputError(f"{path} line {row + 2}: {column} {points[column][row]!r} is not a number")
        for row, value in values.items():
            io.check_value(f"{path} line {row + 2}", "reward" if column == "r0" else column, float(value))
        points[column] = values
    points["run"] = points["run"].astype(str)
    sizes = points.groupby("run").size()
    if sizes.max() > io.MAX_ROWS:
        raise io.InputError(f"{path}: run {sizes.idxmax()!r} has {sizes.max()} rows, over the bound of {io.MAX_ROWS}"
                            " evals per run (analysis.io.MAX_ROWS); thin it before fitting")
    return points


def _check_fields(path, raw):
    """InputError naming the first line whose field count is not the header's: pandas would
    take a longer row's first field as an index (shifting every column) and pad a shorter one."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise io.InputError(f"{path}: not a text CSV file") from None
    reader = csv.reader(StringIO(text))
    try:
        header = next(reader, None)
        for row in reader:
            if row and len(row) != len(header):
                raise io.InputError(f"{path} line {reader.line_num}: {len(row)} field(s), the header has {len(header)}"
                                    " (a ragged CSV); every row needs one value per column")
    except csv.Error as err:
        raise io.InputError(f"{path} line {reader.line_num}: not a valid CSV ({err})") from None


def read_points(path, *, axis="compute", metrics=(io.REWARD_KEY,)):
    """Sweep directory or points CSV, whichever `path` is."""
    path = Path(path)
    if path.is_symlink() and path.is_dir() and not io.is_run(path):
        # as inside a sweep (find_run_dirs), a link is read only when it points at a run: a link
        # to `/` or to a home directory would otherwise walk the whole tree below it
        raise io.InputError(f"{path}: a link to {os.path.realpath(path)}, which is not a run directory;"
                            " give the sweep directory itself")
    if path.is_dir():
        return io.read_sweep(path, axis=axis, metrics=metrics)
    if path.is_file():
        if io.is_multi(metrics):
            raise io.InputError("a points CSV holds one curve per run: give --metric a single column name")
        return read_points_csv(path, metrics[0])
    raise FileNotFoundError(f"{path}: neither a sweep directory nor a points CSV")
