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


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")."""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def neutralise_cell(value):
    """A text cell a spreadsheet would run as a formula (it starts with = + - @, a tab or a carriage
    return) gets a leading single quote, as OWASP advises; anything else is returned unchanged:
    numbers, and text that reads as a number ("-0.5"), stay numbers. A cell that already starts with
    quotes before such a character gets one more, so ``restore_cell`` gives back the exact text.

    >>> neutralise_cell("=cmd|' /C calc'!A0"), neutralise_cell(-0.5), neutralise_cell("-0.5"), neutralise_cell("cispo")
    ("'=cmd|' /C calc'!A0", -0.5, '-0.5', 'cispo')
    """
    if not isinstance(value, str) or not value.lstrip("'").startswith(FORMULA_START) or _is_number(value):
        return value
    return "'" + value


def restore_cell(value):
    """The text ``neutralise_cell`` was given (for reading back a CSV that ``write_csv`` wrote).

    >>> restore_cell("'=HYPERLINK(1)"), restore_cell("'plain"), restore_cell(3)
    ('=HYPERLINK(1)', "'plain", 3)
    """
    if isinstance(value, str) and value.startswith("'") and value.lstrip("'").startswith(FORMULA_START):
        return value[1:]
    return value


def neutralised(table):
    """A copy of ``table`` whose text cells and column names are neutralised (numeric columns untouched)."""
    out = table.copy()
    for column in out.columns:
        if not (out[column].dtype.kind in "biufc" or str(out[column].dtype) == "bool"):
            out[column] = out[column].map(neutralise_cell)
    out.columns = [neutralise_cell(c) for c in out.columns]
    return out


def restored(table):
    """``table`` as read back from a CSV that ``write_csv`` wrote, its text as it was before neutralising."""
    out = table.copy()
    for column in out.columns:
        if out[column].dtype.kind not in "biufc":
            out[column] = out[column].map(restore_cell)
    out.columns = [restore_cell(c) for c in out.columns]
    return out


def write_csv(table, path):
    """Every CSV the analysis writes (leaderboard, extrapolation, plan) goes through here: run names
    come from directory names and points CSVs, so a text cell that a spreadsheet would execute is
    neutralised (``neutralise_cell``)."""
    safe = neutralised(table)
    return atomic(path, lambda tmp: safe.to_csv(tmp, index=False))


def save_figure(fig, path, dpi=130):
    return atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", facecolor="white",
                                                 format=Path(path).suffix.lstrip(".") or "png"))


def safe_name(text, limit=80):
    """A file-name-safe version of a run name."""
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))
    return keep.strip("._")[:limit] or "run"

