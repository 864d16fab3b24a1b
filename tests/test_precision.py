"""Precision axis: fp32 head logits are closer to an fp64 reference than bf16 ones, and
each option gives the generator and the trainer the head dtypes it names. (The KV-cache
sampler against one full forward is tests/test_model.py's.)"""
import torch

from scalerl.precision import PRECISIONS
from scalerl.precision.base import linear_head
from scalerl.precision.bf16 import Bf16Config
from scalerl.precision.fp32_head import Fp32HeadConfig


def test_fp32_head_is_closer_to_fp64_than_bf16():
    torch.manual_seed(0)
    h, w = torch.randn(64, 32, 96), torch.randn(100, 96) * 0.2
    ref = (h.double() @ w.double().T)
    err32 = (linear_head(torch.float32)(h, w).double() - ref).abs().mean()
    err16 = (linear_head(torch.bfloat16)(h, w).double() - ref).abs().mean()
    assert err32 < 1e-5 < err16
    # Softmax probabilities inherit the gap (the generator/trainer mismatch the paper fixes).
    p32 = torch.log_softmax(linear_head(torch.float32)(h, w).float(), -1)
    p16 = torch.log_softmax(linear_head(torch.bfloat16)(h, w).float(), -1)
    pref = torch.log_softmax(ref, -1)
    assert (p16.double() - pref).abs().mean() > 100 * (p32.double() - pref).abs().mean()


def test_option_heads():
    fp = PRECISIONS["fp32_head"].fn(torch.bfloat16, cfg=Fp32HeadConfig())
    h, w = torch.randn(2, 3, 8, dtype=torch.bfloat16), torch.randn(5, 8, dtype=torch.bfloat16)
    assert fp.gen(h, w).dtype == torch.float32 and fp.train(h, w).dtype == torch.float32 and fp.body_dtype is None
    one_side = PRECISIONS["fp32_head"].fn(torch.bfloat16, cfg=Fp32HeadConfig(generator=False))
    assert one_side.gen(h, w).dtype == torch.bfloat16 and one_side.train(h, w).dtype == torch.float32
    assert PRECISIONS["bf16"].fn(torch.float32, cfg=Bf16Config()).train(h.float(), w.float()).dtype == torch.bfloat16
    assert PRECISIONS["fp32"].fn(torch.bfloat16, cfg=None).body_dtype == torch.float32


def test_engine_rounds_the_generators_weights_to_bf16_and_computes_in_the_trainers_dtype():
    from scalerl.generation.engines.torch_engine import TorchGenerator

    engine = PRECISIONS["fp32_head"].fn(torch.float32, cfg=Fp32HeadConfig(generator_body="engine"))
    assert engine.gen_body_dtype is None and engine.gen_round_dtype == torch.bfloat16
    assert PRECISIONS["bf16"].fn(torch.float32, cfg=Bf16Config(generator_body="engine")).gen_round_dtype == torch.bfloat16
    assert Fp32HeadConfig().generator_body == "auto"  # the schema's; conf/precision/*.yaml choose engine
    # bf16 keeps 8 mantissa bits: steps of 2^-7 near 1. 1 + 2^-9 is a quarter step and rounds down to
    # 1.0; 1 + 3 * 2^-9, three quarters, rounds up to 1 + 2^-7; 0.5 is exact. The copy stays fp32.
    own = torch.nn.Linear(3, 1, bias=False)
    gen = TorchGenerator(type("P", (), {"model": own})(), torch.device("cpu"), round_to=torch.bfloat16)
    gen.load_weights([("weight", torch.tensor([[1 + 2**-9, 1 + 3 * 2**-9, 0.5]]))], version=3)
    assert own.weight.dtype == torch.float32 and gen.version == 3
    assert own.weight.tolist() == [[1.0, 1 + 2**-7, 0.5]]
