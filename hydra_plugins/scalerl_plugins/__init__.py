"""scalerl's Hydra plugins (Hydra discovers plugins only under ``hydra_plugins``).

Hydra's plugin scanner imports every module here in *every* Hydra app on the
machine, so importing this package does nothing: it registers no config and
loads neither torch nor scalerl's trainer. scalerl's schemas are registered
by its entry point (``scalerl.sweep``) and by each launched job. The classes
are thin; the logic lives in ``scalerl.launch``.
"""
