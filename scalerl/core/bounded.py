"""Reading a small input file the user names (a study file) without trusting what the path is.

The path is opened without blocking and checked on the open descriptor: a FIFO (which would
block the reader forever), a device such as a link to ``/dev/zero`` (endless), a directory or a
file over the bound raises ``BoundedReadError`` before a byte is read. The analysis package has
the same guard for its inputs (``analysis.io.read_bounded``); it cannot import scalerl (its
layer rule, tests/test_layers.py), and scalerl's entry point must not pay for importing
pandas with it, so each layer keeps its own copy of these few lines.
"""
from __future__ import annotations

import os
import stat


class BoundedReadError(OSError):
    """The path is not a regular file of a readable size; the message names it and says why."""


def read_bounded(path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (else ``BoundedReadError``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise BoundedReadError(f"{path}: a directory, not a file") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
            raise BoundedReadError(f"{path}: {kind}, not a regular file; refusing to read it")
        if info.st_size > limit:
            raise BoundedReadError(f"{path}: {info.st_size} bytes, over the {limit}-byte bound")
        data = f.read(limit + 1)             # a file growing while read is bounded too
    if len(data) > limit:
        raise BoundedReadError(f"{path}: over the {limit}-byte bound")
    return data
