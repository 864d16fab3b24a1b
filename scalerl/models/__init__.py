"""Models (config group ``model``): where the policy's HF checkpoint comes from,
and the policy built on it.

An option is ``fn(cfg, cache_dir, *, log) -> Path`` (the ``PrepareFn``
contract in ``base.py``): a local HF checkpoint directory to start from.
``tiny`` builds the embedded model offline and caches it by a hash of its
config (``tiny_moe``: its mixture-of-experts twin, a tiny Qwen3-MoE); ``hf`` points at any local checkpoint. The supervised warm start, when
``model.warmstart.enabled``, is part of building the run (``train/setup.py``),
not of the option. Both are loaded by ``load.load_model``: ``tiny``'s and ``tiny_moe``'s into
scalerl's own modules (``llama.py``, ``qwen3_moe.py``, without transformers' modeling) where the
run computes eager attention, any other into transformers'. ``policy`` wraps the loaded model with the precision axis's heads.
Must not know about losses, tasks or the training loop.
"""
from scalerl.core.option import Option
from scalerl.models import hf, tiny, tiny_moe

MODELS: dict[str, Option] = {
    "tiny": Option(tiny.TinyModelConfig, tiny.prepare_tiny),
    "tiny_moe": Option(tiny_moe.TinyMoeModelConfig, tiny_moe.prepare_tiny_moe),
    "hf": Option(hf.HFModelConfig, hf.prepare_hf),
}
