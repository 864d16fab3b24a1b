"""A command whose reader has gone (`| head`) exits 141 without a traceback (analysis/pipes.py;
the sweep entry point has its own three lines in scalerl/sweep.py)."""
import os
import subprocess
import sys

import pytest
from helpers import REPO

BODY = "with quiet_broken_pipe():\n    for i in range(100000):\n        print('row', i)\n"

@pytest.mark.parametrize("module", ["analysis.pipes"])
def test_a_closed_pipe_ends_the_command_quietly(module):
    read, write = os.pipe()
    os.close(read)                                  # the reader is gone before the first write
    try:
        proc = subprocess.run([sys.executable, "-c", f"from {module} import quiet_broken_pipe\n{BODY}"], cwd=REPO,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")

def test_without_the_guard_it_is_a_traceback():   # what the guard removes: the test above can fail
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-c", BODY.replace("with quiet_broken_pipe():\n    ", "if True:\n    ")],
                              cwd=REPO, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode != 0 and "BrokenPipeError" in proc.stderr
