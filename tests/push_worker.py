"""A generator process that sends its weights back after every push, for tests/test_push_stream.py only.

The test starts it in place of ``python -m scalerl.generation.fleet`` (``GeneratorPool.worker``);
after each push it sends the generator model's whole state dict (its own dtype) to the trainer
under ``echo/{rank}/{version}`` (not ``weights/``: the gloo group's rendezvous prefix), so the
test compares tensors, not logits.
"""
from __future__ import annotations

import sys

from scalerl.generation.fleet.worker import GeneratorServer, main

ECHO_TAG = 1 << 29
"""Gloo tag of an echo: ECHO_TAG + version (below the probe tags, above any job number here)."""


class EchoServer(GeneratorServer):
    def drain(self) -> None:
        before = self.version
        super().drain()
        if self.version != before:
            state = {k: v.clone() for k, v in self.generator.policy.model.state_dict().items()}
            self.spoke.send(f"echo/{self.spec.rank}/{self.version}", ECHO_TAG + self.version, {}, state)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], server_cls=EchoServer))
