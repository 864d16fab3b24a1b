"""Launching: run identity (config hash -> run directory), study files, the
Hydra application and task function, and the logic behind scalerl's Hydra
sweeper and launchers (the thin plugin classes live in
``hydra_plugins/scalerl_plugins``). Must not contain training math; it reaches
the trainer only through ``task.run_arm``.
"""
