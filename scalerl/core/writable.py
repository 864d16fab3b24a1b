"""Whether a directory the config names (``out_root``, ``hydra.run.dir``, ``cache_dir``) can be made
and written, asked before anything is created: a run dir under ``/proc`` or a read-only mount
otherwise fails in Hydra's or the warm start's first ``mkdir``, with a traceback and, for a cache,
after the run directory has filled."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def unwritable(text: str) -> str | None:
    """Why the directory ``text`` cannot be created or written (None: it can). Nothing is left on disk:
    the nearest existing ancestor is probed with a temporary directory, removed at once (a
    permission bit says nothing of procfs or of a read-only mount)."""
    path = Path(os.path.expanduser(text))
    if path.exists() and not path.is_dir():
        return f"{str(path)!r} is a file, not a directory"
    base = path
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return f"{str(base)!r}, on its path, is a file, not a directory"
    try:
        probe = tempfile.mkdtemp(prefix=".scalerl-probe-", dir=base)
    except OSError as e:
        why = e.strerror or str(e)
        return f"{str(path)!r} cannot be created under {str(base)!r} ({why})" if base != path else \
            f"{str(path)!r} is not writable ({why})"
    shutil.rmtree(probe, ignore_errors=True)
    return None
