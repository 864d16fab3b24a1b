"""Launching: run and sweep identity (config hash -> run directory, overrides
-> sweep home, finished runs found by hash), study files, the Hydra
application (its --help and shell completion) and task function, the
end-of-sweep leaderboard, and the logic behind scalerl's Hydra sweeper and
launchers (the thin plugin classes live in ``hydra_plugins/scalerl_plugins``),
and the crash tests' one seam (``faults``: nothing unless ``SCALERL_FAILPOINT`` is set).
Must not contain training math; it reaches the trainer only through
``task.run_arm``.
"""
