"""scalerl: a platform for studying how RL for LLMs scales with compute.

The package tree is the architecture (see docs/architecture.md, "Layout"):

- ``config``      typed Hydra schemas, validation and derived quantities
- ``models``      building / loading HF causal LMs and the precision-aware policy head
- ``tasks``       verifiable tasks and their pure reward functions
- ``generation``  the narrow sampling interface (token ids in, ids + logprobs out)
- ``losses``, ``aggregation``, ``adv_norm``, ``filters``, ``length``, ``precision``
                  one small module per design-axis option, one registry dict per axis
- ``train``       the single readable RL loop and its helpers (checkpoint, compute, ...)
- ``launch``      run directories, config hashing, the Hydra sweeper/launcher logic
- ``cluster``     a local single-node SLURM cluster for tests and demos
"""

__version__ = "0.1.0"
