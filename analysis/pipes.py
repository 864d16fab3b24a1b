"""A command-line tool exits quietly when its reader goes away (`python -m analysis fit ... | head`).

The same helper as scalerl/core/pipes.py, for `python -m scalerl.sweep`: the analysis package
imports nothing of scalerl (tests/test_layers.py), so it keeps its own copy of these lines.
When the reader closes the pipe, the next write (or the flush at exit) raises BrokenPipeError,
which Python prints as a traceback; a Unix filter just stops: exit 141 (128 + SIGPIPE), silently,
with stdout pointed at /dev/null so the interpreter's last flush cannot raise again (Python's
docs, library/signal.html, "Note on SIGPIPE").
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


@contextlib.contextmanager
def quiet_broken_pipe():
    """Run the body; if its reader closed stdout, exit 141 without a traceback.

    Flushes stdout at the end of the body (also on SystemExit, e.g. after ``--help``), so a
    write that argparse or print left in the buffer fails here, inside the guard."""
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout without a descriptor (captured): nothing left to flush
            pass
        raise SystemExit(EXIT_BROKEN_PIPE) from None
