"""A generator process that sends its weights back after every push, and what a test needs to run it
(``WORKER``, ``echo``, ``echo_spec``): tests/test_push_stream.py and the sharded script it starts
import them from here, a module meant as a library (no test imports another test).

The test starts it in place of ``python -m scalerl.generation.worker`` (``GeneratorPool.worker``);
after each push it sends the generator model's whole state dict (its own dtype) to the trainer
under ``echo/{rank}/{version}`` (not ``weights/``: the gloo group's rendezvous prefix), so the
test compares tensors, not logits.
"""
from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from scalerl.generation.fleet.generator_loop import GeneratorServer, WorkerSpec, main
from scalerl.precision import PRECISIONS

ECHO_TAG = 1 << 29
"""Gloo tag of an echo: ECHO_TAG + version (below the probe tags, above any job number here)."""
WORKER = (str(Path(__file__)),)
"""``GeneratorPool.worker`` for this echo worker: the interpreter runs this file."""


def echo(pool, version):
    """Every generator's state dict, as it sent it back after the push of ``version``."""
    return [pool.hub.recv(j, f"echo/{j}/{version}", ECHO_TAG + version, "waiting for the echo")[1]
            for j in range(pool.n)]


def echo_spec(ckpt, n, dtype):
    """A ``WorkerSpec`` for ``n`` echo generators of ``ckpt`` holding ``dtype`` weights (fp32 heads)."""
    heads = partial(PRECISIONS["fp32"].fn, cfg=PRECISIONS["fp32"].schema())
    return WorkerSpec(rank=0, n_generators=n, checkpoint=str(ckpt), device="cpu", dtype=dtype, compute_dtype="float32",
                      heads=heads, attn_implementation=None, threads=1, timeout_s=60, in_flight=True, schema=())


class EchoServer(GeneratorServer):
    def drain(self) -> None:
        before = self.version
        super().drain()
        if self.version != before:
            state = {k: v.clone() for k, v in self.generator.policy.model.state_dict().items()}
            self.spoke.send(f"echo/{self.spec.rank}/{self.version}", ECHO_TAG + self.version, {}, state)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], server_cls=EchoServer))
