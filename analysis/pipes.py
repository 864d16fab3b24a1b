"""A command-line tool exits quietly when its reader goes away.

``python -m analysis fit ... | head`` closes the pipe after ten lines; the next write (or
the flush at exit) raises BrokenPipeError, which Python would print as a traceback, or as
"Exception ignored ... BrokenPipeError" at shutdown. Like any Unix filter, the tool should
just stop: exit 141 (128 + SIGPIPE, what a shell reports for a filter killed by SIGPIPE),
silently. The recipe is the one in Python's docs (library/signal.html, "Note on SIGPIPE"):
point stdout at /dev/null so the interpreter's final flush cannot raise again.
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
