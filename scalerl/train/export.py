"""Export the final policy as an ordinary Hugging Face checkpoint directory.

``<run_dir>/final_policy/`` (config, safetensors weights, tokenizer) loads with
``AutoModelForCausalLM.from_pretrained`` or as ``model=hf model.path=...``,
whether the trainer was sharded or not: the weights come from
``sharding.full_state_dict`` (the master weights, gathered) in the generator's
dtype, the run's compute dtype (bf16 on GPU, fp32 on CPU). Written to a temp
directory and renamed, so a crash never leaves half an export.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from scalerl.train.sharding import full_state_dict

EXPORT_DIR = "final_policy"


def export_policy(run_dir: Path, r, dist, tok) -> Path | None:
    """The run ``r``'s policy, with the tokenizer ``tok``, as an HF checkpoint. Collective when sharded. Rank 0 writes; returns the directory there, None elsewhere."""
    # A plain module carries the config and the save logic: the generator's model, which is the
    # trainer's own unless the trainer is sharded (its parameters are shards), given the gathered weights.
    vessel = r.policy.model
    weights = full_state_dict(r.model, dtype=next(vessel.parameters()).dtype)
    if not dist.main:
        return None
    out = Path(run_dir) / EXPORT_DIR
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    vessel.save_pretrained(tmp, state_dict={k: v.cpu() for k, v in weights.items()}, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
