"""An arm's watch on its sweep (scalerl/launch/local_pool.py: ``_die_with_sweep``).

An arm's parent is the sweep's forkserver, which outlives the sweep while any arm runs, so the arm
watches its result pipe instead: once the sweep's end is closed (the sweep died), the arm gets
SIGTERM and checkpoints. After the arm has replied, the sweep closes its end as a matter of course,
and that must not read as a death.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time

import pytest

from scalerl.launch import local_pool


def _arm(conn, replied_first: bool, watching) -> None:
    replied = threading.Event()
    if replied_first:
        replied.set()
    local_pool._die_with_sweep(conn, replied)
    watching.set()
    time.sleep(60)  # ended by the watch's SIGTERM, or by the test


def _start(replied_first: bool):
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    watching = ctx.Event()
    proc = ctx.Process(target=_arm, args=(writer, replied_first, watching))
    proc.start()
    writer.close()  # the arm holds the only writer, as in ArmProcesses.start_more
    assert watching.wait(120), "the arm's watch did not start"
    return proc, reader


@pytest.mark.skipif(not hasattr(__import__("select"), "poll"), reason="select.poll")
def test_an_arm_whose_sweep_is_gone_gets_sigterm():
    proc, reader = _start(replied_first=False)
    reader.close()  # what the kernel does to a killed sweep's end
    proc.join(120)
    assert proc.exitcode == -signal.SIGTERM


@pytest.mark.skipif(not hasattr(__import__("select"), "poll"), reason="select.poll")
def test_an_arm_that_has_replied_is_not_stopped_when_the_sweep_closes_its_end():
    proc, reader = _start(replied_first=True)
    try:
        reader.close()  # the sweep read the reply and closed its end
        proc.join(3 * local_pool.SWEEP_POLL_S)
        assert proc.is_alive(), f"the arm ended with {proc.exitcode} after it had replied"
    finally:
        proc.kill()
        proc.join()
