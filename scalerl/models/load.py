"""Load any local HF causal-LM checkpoint directory (the tiny one included)."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from typing import TYPE_CHECKING

import torch

from scalerl.models import llama, qwen3_moe
from scalerl.models.extensions import diagnose_broken_extensions
from scalerl.models.tokenizer import PLAIN_TOKENIZERS, PlainTokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def transformers_quiet():
    """transformers, imported on first use: its modeling costs about 3 CPU-s per process
    (docs/testing.md), and the embedded model runs on scalerl's own module (``llama.py``)."""
    with diagnose_broken_extensions():  # transformers' model classes import torchvision when it is installed
        import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-arm logs stay readable
    hf_logging.set_verbosity_error()
    return transformers


def compute_dtype(name: str, device: torch.device) -> torch.dtype:
    """``model.dtype`` as a torch dtype; auto follows the device: bf16 on CUDA, fp32 elsewhere."""
    if name != "auto":
        return getattr(torch, name)
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_checkpoint(
    path: str | Path, *, dtype: torch.dtype, device: torch.device, attn_implementation: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load model + tokenizer from a local directory; never touches the network."""
    return load_model(path, dtype=dtype, device=device, attn_implementation=attn_implementation), load_tokenizer(path)


OWN_MODULES = {"llama": llama.LlamaForCausalLM, "qwen3_moe": qwen3_moe.Qwen3MoeForCausalLM}
"""scalerl's own modules, by config.json's ``model_type``: the embedded models' (``tiny``, ``tiny_moe``)."""


def own_module(path: str | Path) -> type:
    """The own module class of the checkpoint at ``path``; ValueError naming the type if there is none."""
    kind = json.loads((Path(path) / "config.json").read_text()).get("model_type")
    if kind not in OWN_MODULES:
        raise ValueError(f"{path}: scalerl's own modules compute {sorted(OWN_MODULES)}, not model_type={kind!r}; "
                         "use model=hf (transformers' modeling)")
    return OWN_MODULES[kind]


def load_model(
    path: str | Path, *, dtype: torch.dtype, device: torch.device, attn_implementation: str | None = None,
    lean: bool = False,
) -> PreTrainedModel:
    """The model alone (the run's tokenizer is the run plan's, ``train/run_plan.py``). ``lean``:
    scalerl's own module (``OWN_MODULES``; the embedded models, ``RunPlan.lean``), else transformers'."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"model.path={str(path)!r} is not a Hugging Face checkpoint directory (no config.json). "
            "Point model.path at a local directory; scalerl never downloads weights."
        )
    if lean:
        return own_module(path).from_pretrained(path, dtype=dtype, device=device)
    kwargs = {"dtype": dtype, "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    transformers = transformers_quiet()
    with diagnose_broken_extensions():
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if model.dtype != dtype:  # transformers < 4.56 names the argument torch_dtype and ignores dtype
        model = model.to(dtype)
    return model.to(device)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase | PlainTokenizer:
    """The checkpoint's tokenizer (tasks render prompts with its chat template). A plain one without a
    chat template (the embedded models') is read without transformers (``PlainTokenizer``)."""
    if PlainTokenizer.serves(path):
        return PlainTokenizer(path)
    transformers, path = transformers_quiet(), Path(path)
    try:
        kind = json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        kind = None
    # A plain tokenizers-backed tokenizer (the embedded model's) is loaded by its class: AutoTokenizer's
    # module imports transformers' masking utilities and torch._dynamo, about 1.2 CPU-s more per process.
    cls = transformers.PreTrainedTokenizerFast if kind in PLAIN_TOKENIZERS else transformers.AutoTokenizer
    tok = cls.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:  # many chat checkpoints ship without a pad token
        tok.pad_token = tok.eos_token
    return tok


# ---------------------------------------------------------------- loading without a full copy


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Parameters registered inside go to the meta device (no memory; each is allocated, uninitialised,
    only for the moment of its creation); buffers stay real: the rotary inverse frequencies are
    computed at construction and are not in checkpoints."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def build_empty(path: str | Path, *, dtype: torch.dtype, attn_implementation: str | None = None,
                lean: bool = False) -> PreTrainedModel:
    """The checkpoint's model with its parameters on the meta device (``CheckpointUnits``
    fills them unit by unit); its buffers are real. ``lean``: as in ``load_model``."""
    if lean:
        cls = own_module(path)
        return cls.empty(cls.config_class.from_pretrained(path), dtype)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    transformers = transformers_quiet()
    config = transformers.AutoConfig.from_pretrained(Path(path), local_files_only=True)
    with diagnose_broken_extensions(), parameters_on_meta():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    return model


class CheckpointUnits:
    """Fills a meta-built model's parameters from a safetensors checkpoint one module (an FSDP2
    unit) at a time, reading only that module's tensors: with ``fully_shard`` right after each
    (``train/sharding.py``), a rank never holds more than its shards plus one unit, against a full
    fp32 copy per rank before (8B: 32 GB each). Tied weights (Qwen2's embedding and head) stay one
    tensor. Checkpoints without safetensors, or whose tensor names are not the model's (an MoE saved
    one tensor per expert), are read whole, once, as before."""

    def __init__(self, path: str | Path, model: PreTrainedModel, *, dtype: torch.dtype, device: torch.device):
        self.path, self.model, self.dtype, self.device = Path(path), model, dtype, device
        self.names: dict[int, list[str]] = {}  # id(parameter) -> every name it has in the model
        for name, p in model.named_parameters(remove_duplicate=False):
            self.names.setdefault(id(p), []).append(name)
        index = self.path / "model.safetensors.index.json"
        if index.exists():
            self.files = {k: self.path / f for k, f in json.loads(index.read_text())["weight_map"].items()}
        elif (self.path / "model.safetensors").exists():
            from safetensors import safe_open

            with safe_open(str(self.path / "model.safetensors"), framework="pt") as f:
                self.files = {k: self.path / "model.safetensors" for k in f.keys()}
        else:
            self.files = None
        if self.files is not None and not all(any(n in self.files for n in names) for names in self.names.values()):
            # Names that transformers converts at load (``from_pretrained``'s conversion mapping): a
            # mixture of experts saved one tensor per expert (Qwen3-MoE's ``experts.0.gate_proj.weight``,
            # Mixtral's ``block_sparse_moe.experts.0.w1.weight``) fills one (E, ...) parameter
            # (``experts.gate_up_proj``). Read whole through transformers, as a .bin checkpoint is.
            self.files = None
        self._whole: dict[str, torch.Tensor] | None = None

    def materialize(self, module: torch.nn.Module) -> int:
        """Give ``module``'s meta parameters (those not already materialized or sharded) their
        checkpoint values, in ``dtype`` on ``device``. Returns the number of values filled."""
        todo = [(mod, leaf, p) for mod in module.modules() for leaf, p in mod._parameters.items()
                if p is not None and p.device.type == "meta"]
        wanted = {id(p): self._key(p) for _, _, p in todo}
        values = self._read(sorted(set(wanted.values())))
        made: dict[int, torch.nn.Parameter] = {}
        for mod, leaf, p in todo:
            if id(p) not in made:
                value = values[wanted[id(p)]].to(device=self.device, dtype=self.dtype)
                made[id(p)] = torch.nn.Parameter(value, requires_grad=p.requires_grad)
            mod._parameters[leaf] = made[id(p)]
        return len(made)

    def _key(self, p) -> str:
        names = self.names[id(p)]
        have = self.files if self.files is not None else self._load_whole()
        for name in names:
            if name in have:
                return name
        raise KeyError(f"{self.path}: the checkpoint has no tensor for parameter {names[0]!r}")

    def _read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        if self.files is None:
            return {k: self._load_whole()[k] for k in keys}
        from safetensors import safe_open

        out: dict[str, torch.Tensor] = {}
        for file in sorted({self.files[k] for k in keys}):
            with safe_open(str(file), framework="pt") as f:  # opened per unit: the mapping goes with it
                out.update({k: f.get_tensor(k) for k in keys if self.files[k] == file})
        return out

    def _load_whole(self) -> dict[str, torch.Tensor]:
        if self._whole is None:  # e.g. pytorch_model.bin: one full copy, as every load did before
            transformers = transformers_quiet()
            with diagnose_broken_extensions():
                full = transformers.AutoModelForCausalLM.from_pretrained(self.path, dtype=self.dtype, local_files_only=True)
            self._whole = dict(full.state_dict())
        return self._whole


# ---------------------------------------------------------------- the checkpoint's own names


def checkpoint_format(path: str | Path) -> Callable[[Iterable[tuple[str, torch.Tensor]]], dict[str, torch.Tensor]] | None:
    """Turns the model's named tensors into the checkpoint's own names and layout, as ``save_pretrained``
    writes them; None when the two agree (every dense model). transformers (5.x) converts some
    architectures' tensors at load: a mixture of experts saved one tensor per expert (Qwen3-MoE's
    ``mlp.experts.0.gate_proj.weight``) becomes one (E, ...) parameter (``mlp.experts.gate_up_proj``),
    and Mixtral's ``block_sparse_moe`` is renamed ``mlp``. An engine that loads the checkpoint with
    its own code (vLLM) takes a push only in the checkpoint's names: Mixtral's fused names are refused
    ('no module or parameter named layers.0.mlp'), Qwen3-MoE's were taken without error and left the
    experts stale (docs/vllm.md, 'Mixtures of experts')."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import PrefixChange, revert_weight_conversion
    except ImportError:  # transformers 4.x keeps an MoE's per-expert modules: its names are the checkpoint's
        return None
    model = build_empty(path, dtype=torch.float32)  # meta: only its config and module classes are read
    mapping = [m for m in get_model_conversion_mapping(model, add_legacy=False) if not isinstance(m, PrefixChange)]
    if not mapping:
        return None
    return lambda named: revert_weight_conversion(model, dict(named))
