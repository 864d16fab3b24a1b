"""JSON and JSONL files that survive a crash: the run directory's records.

JSON files (``progress.json``, ``summary.json``, ``launch.json``) are replaced
atomically, so a crash never leaves a half-written one, and a failed write
(a full disk) leaves no temporary file behind and names the file. JSONL files
(``metrics.jsonl``, ``steps.jsonl``) are append-only with an fsync per row; a
failed append is rolled back, and on resume they are cut back to the
checkpoint's step, so no row is lost or duplicated.

Reading a JSONL file is strict: its rows must be JSON objects with strictly
increasing integer ``step`` and no non-finite number (the writer stores null for
one, so a NaN or Infinity was written by hand or by another program). Only a last line without its newline (a row cut
short by a kill) is ignored; any other bad line is an error naming the file and
the line, never a row silently dropped or kept out of order.
"""
from __future__ import annotations

import errno as errnos
import json
import math
import os
from pathlib import Path



class RecordError(ValueError):
    """A run record (JSONL file) that the trainer could not have written: corrupt or out of order."""


def os_reason(err: OSError) -> str:
    """``No space left on device (ENOSPC)``: the reason, without the path the caller names itself."""
    code = errnos.errorcode.get(err.errno or -1)
    return f"{err.strerror or err}" + (f" ({code})" if code else "")


def write_failed(path: Path, err: OSError, what: str = "write") -> OSError:
    """The OSError to raise when ``path`` could not be written: one line naming the file; the errno is kept."""
    out = OSError(f"could not {what} {path}: {os_reason(err)}")
    out.errno = err.errno
    return out


def write_json_atomic(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=str, allow_nan=True))


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step; on failure no temporary is left and the error names ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)  # never leave an empty or partial temporary behind
        raise write_failed(path, e) from None


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def clean(row: dict) -> dict:
    """JSON-safe metrics: non-finite floats become null (the analysis treats them as missing)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def encode_row(row: dict) -> bytes:
    """One JSONL line, as ``JsonlFile.append`` writes it."""
    return (json.dumps(clean(row)) + "\n").encode()


class JsonlFile:
    def __init__(self, path: Path):
        self.path = Path(path)

    def rows(self) -> list[dict]:
        """Parsed rows, strictly increasing in ``step``.

        Raises ``RecordError`` naming the file and line for a corrupt row or a
        step that does not increase; a partial last line (killed mid-write) is ignored.
        """
        if not self.path.exists():
            return []
        try:
            text = self.path.read_text()
        except UnicodeDecodeError as e:
            raise RecordError(f"{self.path}: not a text file ({e.reason} at byte {e.start}); "
                              "move it away to start this run's records afresh") from None
        lines = text.split("\n")
        out, previous = [], None
        for number, line in enumerate(lines, 1):
            last = number == len(lines)
            if last and not line:
                break
            try:
                row = json.loads(line)
            except ValueError:
                if last:  # no newline yet: the row a kill cut short
                    break
                raise self._error(number, f"not a JSON row: {line[:80]!r}") from None
            if not isinstance(row, dict) or not isinstance(row.get("step"), int) or isinstance(row["step"], bool):
                raise self._error(number, f"not a row with an integer step: {line[:80]!r}")
            bad = next((k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)), None)
            if bad is not None:  # ``append`` writes null for a non-finite value (``clean``): never NaN or Infinity
                raise self._error(number, f"{bad} is {row[bad]}, not a finite number or null")
            if previous is not None and row["step"] <= previous:
                raise self._error(number, f"step {row['step']} after step {previous}; rows must be strictly "
                                          "increasing in step")
            previous = row["step"]
            out.append(row)
        return out

    def _error(self, number: int, why: str) -> RecordError:
        return RecordError(f"{self.path} line {number}: {why} (the trainer never writes this; "
                           "fix or remove the line, or the file, to continue)")

    def truncate_after(self, step: int) -> int:
        """Keep rows with ``step <= step``; returns how many were dropped."""
        rows = self.rows()
        keep = [r for r in rows if r["step"] <= step]
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
            os.replace(tmp, self.path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise write_failed(self.path, e) from None
        return len(rows) - len(keep)

    def append(self, row: dict) -> None:
        """One row, fsynced; if the write fails (a full disk) the file is cut back to what it was."""
        data = encode_row(row)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as e:
                os.ftruncate(fd, size)  # no half row left for the next append to glue onto
                raise write_failed(self.path, e, "append to") from None
        finally:
            os.close(fd)
