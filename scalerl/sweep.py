"""``python -m scalerl.sweep``: run one arm, or a sweep of arms.

Laptop (no GPU, no downloads; the embedded tiny model and task)::

    python -m scalerl.sweep                              # the ScaleRL recipe, one run
    python -m scalerl.sweep -m loss=cispo,dapo,gspo      # three arms in parallel
    python -m scalerl.sweep -m sweep=loo                 # a study file from sweeps/
    python -m scalerl.sweep -m sweep=loo --status        # done/running/failed/pending per arm
    python -m scalerl.sweep -m sweep=loo --dry-run       # expand and validate, launch nothing

SLURM cluster (same command plus a launcher)::

    python -m scalerl.sweep -m loss=cispo,dapo,gspo hydra/launcher=slurm \\
        hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1 model=hf model.path=/ckpt/8b

Relaunching any of these skips finished arms and resumes unfinished ones.
"""
from __future__ import annotations

from scalerl.launch.app import main

if __name__ == "__main__":
    main()
