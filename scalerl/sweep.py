"""``python -m scalerl.sweep``: run one arm, or a sweep of arms.

Laptop (no GPU, no downloads; the embedded tiny model and task)::

    python -m scalerl.sweep                              # the ScaleRL recipe, one run
    python -m scalerl.sweep -m loss=cispo,dapo,gspo      # three arms in parallel
    python -m scalerl.sweep -m sweep=loo                 # a study file from sweeps/
    python -m scalerl.sweep -m sweep=loo --status        # done/running/failed/pending per arm

SLURM cluster (same command plus a launcher)::

    python -m scalerl.sweep -m loss=cispo,dapo,gspo hydra/launcher=slurm \\
        hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1 model=hf model.path=/ckpt/8b

Relaunching any of these skips finished arms and resumes unfinished ones.
"""
from __future__ import annotations

import os
import sys

FLAGS = {"--status": "status", "--dry-run": "dry-run"}


def main() -> None:
    action = "run"
    for flag, name in FLAGS.items():
        if flag in sys.argv:
            sys.argv.remove(flag)
            action = name
    if action != "run" and not ({"-m", "--multirun"} & set(sys.argv)):
        sys.argv.insert(1, "-m")  # status and dry-run are sweeper actions
    os.environ["SCALERL_SWEEP_ACTION"] = action

    import hydra

    from scalerl.config.store import register_configs
    from scalerl.launch.task import run_arm
    from scalerl.paths import conf_dir

    register_configs()
    hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")(run_arm)()


if __name__ == "__main__":
    main()
