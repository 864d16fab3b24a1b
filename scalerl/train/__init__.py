"""Training: the one RL loop (``loop.train``) and the helpers it calls.

Owns rollout, evaluation, the policy update, compute accounting,
checkpoints, metrics files and the supervised warm start. Design-axis
behaviour comes only from the registries (``LOSSES[...]`` etc.), never from
``if name == ...`` branches here. Must not know about Hydra launchers.
"""
