"""A generator process with a pinned schedule, for the PipelineRL tests only.

``tests/paced.py`` starts it in place of ``python -m scalerl.generation.worker``
(``GeneratorPool.worker``) and passes the schedule in ``SCALERL_TEST_PACE``
(``MODE:SWAP_AT``). Nothing in the production path reads either: a user's config
cannot reach them.

- ``trainer_first``: a shard of step s starts only with version s-1 (slow generators,
  fast trainer: nothing is ever stale);
- ``SWAP_AT >= 0``: at that decode step of every batch the generator waits for the newest
  version the trainer can make without this batch (s-1) and swaps it in: a deterministic
  in-flight update.
"""
from __future__ import annotations

import os
import sys

from scalerl.generation.fleet.generator_loop import GeneratorServer, main

MODE, _, SWAP_AT = os.environ.get("SCALERL_TEST_PACE", "free:-1").partition(":")
SWAP_AT = int(SWAP_AT or -1)


class PacedServer(GeneratorServer):
    def weights_floor(self, step: int, min_version: int) -> int:
        return max(min_version, step - 1) if MODE == "trainer_first" else min_version

    def between_steps(self, step: int, t: int) -> None:
        super().between_steps(step, t)
        if t == SWAP_AT:
            self.wait_for(lambda: self.version >= step - 1,
                          f"step {step}: swap at decode step {t}, waiting for weights >= {step - 1}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], server_cls=PacedServer))
