"""What the vLLM tests share (tests/test_vllm.py, tests/test_vllm_pipeline.py): a sharpened tiny
model and its prompts (fixtures), the trainer's side of a log-prob comparison, and sampling settings.
A library, not a test module: no test imports another test.
"""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch

from scalerl.generation import SamplingParams
from scalerl.generation.engines import left_pad
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy, token_logprobs
from scalerl.models.tiny import TinyModelConfig, prepare_tiny
from scalerl.precision import PRECISIONS

CPU = torch.device("cpu")
NEVER = 3  # <unk>: its LM-head row is zeroed below, so it is never sampled; as EOS, rows end at their budget
PROMPTS = ["123+456=", "907+15=", "88*9=", "500+500=", "2+2=", "31*7="]


def vllm_module(name: str = "vllm"):
    """``name``, a vLLM module, imported. Without vLLM a laptop skips the test; under ``CI=1`` (set by
    .ci/run, which installs vLLM) the ImportError fails it, as docs/testing.md says vLLM's tests do."""
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The tiny model with its LM head scaled x25: logits of std ~5 instead of ~0.2 (the largest of
    the 99 near +12), and <unk>'s row zeroed (logit 0: probability ~1e-5 per token)."""
    base = prepare_tiny(TinyModelConfig(), tmp_path_factory.mktemp("cache"), log=lambda *a: None)
    model, tok = load_checkpoint(base, dtype=torch.float32, device=CPU)
    with torch.no_grad():
        model.lm_head.weight.mul_(25.0)
        model.lm_head.weight[NEVER] = 0.0
    out = tmp_path_factory.mktemp("sharp")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def prompts(ckpt):
    tok = load_checkpoint(ckpt, dtype=torch.float32, device=CPU)[1]
    return [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]


def trainer_policy(ckpt, body, precision, cfg, temperature):
    heads = PRECISIONS[precision].fn(body, cfg=cfg)
    model = load_checkpoint(ckpt, dtype=heads.body_dtype or body, device=CPU)[0]
    policy = Policy(model, gen_head=heads.gen, train_head=heads.train)
    policy.sampling_temperature = temperature  # recomputed() divides the trainer's logits by it, as the loss does
    return policy, heads


def recomputed(policy, prompts, gen, group):
    """The trainer's log-probs of the generated tokens: what the loss compares behaviour log-probs with."""
    ids, mask = left_pad(prompts, 0, CPU)
    with torch.no_grad():
        logits = policy.completion_logits(ids, mask, gen.tokens, gen.present.long(), group=group)
    return token_logprobs(logits / policy.sampling_temperature, gen.tokens)


def params(temperature, n=4, max_new=6, eos=2, **kw):
    return SamplingParams(max_new_tokens=max_new, eos_token_id=eos, pad_token_id=0, temperature=temperature, n=n, **kw)


def seeded(p: SamplingParams, seed: int, n_prompts: int) -> SamplingParams:
    """``p`` with per-prompt seeds derived from ``seed`` (a completion's randomness is its prompt's seed)."""
    return dataclasses.replace(p, seeds=torch.arange(n_prompts, dtype=torch.long) + 1000 * seed)
