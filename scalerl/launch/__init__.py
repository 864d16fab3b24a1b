"""Launching: run identity (config hash -> run directory), study files, the
Hydra task function, and the logic behind scalerl's Hydra sweeper and local
launcher (the thin plugin classes live in ``hydra_plugins/scalerl_plugins``).
Must not contain training math.
"""
