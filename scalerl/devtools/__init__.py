"""Development and CI tools, not part of a run: nothing under ``scalerl`` outside
this package imports it (``tests/test_layers.py`` checks).

- ``local_slurm``: a real single-node SLURM cluster on this machine, for the
  SLURM tests, CI and trying ``hydra/launcher=slurm``
  (``python -m scalerl.devtools.local_slurm install|start|status|env|stop``).
"""
