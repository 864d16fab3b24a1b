"""Models (config group ``model``): where the policy's HF checkpoint comes from.

``fn(cfg, task, cache_dir) -> Path`` returns a local HF checkpoint directory
to load; ``tiny`` builds (and warm-starts) the embedded model offline and
caches it by a hash of its config, ``hf`` points at any local checkpoint.
Both are then loaded by the same ``load.load_checkpoint``. Must not know
about losses or the training loop.
"""
from scalerl.config.registry import Option
from scalerl.models import hf, tiny_option

MODELS: dict[str, Option] = {
    "tiny": Option(tiny_option.TinyModelConfig, tiny_option.prepare_tiny),
    "hf": Option(hf.HFModelConfig, hf.prepare_hf),
}
