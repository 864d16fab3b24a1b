"""Load any local HF causal-LM checkpoint directory (the tiny one included)."""
from __future__ import annotations

from pathlib import Path

import torch

from scalerl.models.extensions import diagnose_broken_extensions

with diagnose_broken_extensions():  # transformers' model classes import torchvision when it is installed
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # per-arm logs stay readable
hf_logging.set_verbosity_error()


def compute_dtype(name: str, device: torch.device) -> torch.dtype:
    """``model.dtype`` as a torch dtype; auto follows the device: bf16 on CUDA, fp32 elsewhere."""
    if name != "auto":
        return getattr(torch, name)
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_checkpoint(
    path: str | Path, *, dtype: torch.dtype, device: torch.device, attn_implementation: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model + tokenizer from a local directory; never touches the network."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"model.path={str(path)!r} is not a Hugging Face checkpoint directory (no config.json). "
            "Point model.path at a local directory; scalerl never downloads weights."
        )
    kwargs = {"dtype": dtype, "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    with diagnose_broken_extensions():
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if model.dtype != dtype:  # transformers < 4.56 names the argument torch_dtype and ignores dtype
        model = model.to(dtype)
    return model.to(device), load_tokenizer(path)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer (tasks render prompts with its chat template)."""
    tok = AutoTokenizer.from_pretrained(Path(path), local_files_only=True)
    if tok.pad_token_id is None:  # many chat checkpoints ship without a pad token
        tok.pad_token = tok.eos_token
    return tok
