"""The product fork (``task.think_mul``; docs/embedded.md, "A miniature whose ceiling the recipe
decides"): column products worked out by hand, always right and graded on their answer, shown in
only the asked-for share of the first phase's product demonstrations and never in the final
steps, and a value of 0 that leaves the default's demonstrations and warm-start key as they were."""
from __future__ import annotations

import pytest

from scalerl.config import as_config_error, compose, validate
from scalerl.tasks.arith import ArithConfig, ProblemStream, build_arith, product_scratchpad
from scalerl.tasks.rewards import exact_match_reward
from scalerl.train.warmstart import task_key


def _read_scratchpad(trace: str) -> str:
    """The answer a scratchpad implies, read as an addition's: the last carry, then the columns' last digits."""
    cols = [c.split("=")[1] for c in trace.split("<think>", 1)[1].split("</think>", 1)[0].split(" ")]
    return cols[-1][:-1] + "".join(c[-1] for c in reversed(cols))


def test_product_scratchpads_by_hand():
    # 47 x 36. Units column: 7*6 = 42 -> digit 2, carry 4. Tens: 4*6 + 7*3 + 4 = 24 + 21 + 4 = 49, written
    # at three digits (its largest, 9*9 + 9*9 + 8 = 170, has three) -> digit 9, carry "04". Hundreds: 4*3 + 4 = 16.
    # The answer: 16, then 9, then 2 -> 1692 = 47 x 36.
    assert product_scratchpad("47*36=") == "7*6+0=42 4*6+7*3+4=049 4*3+04=16"
    # 05 x 30 = 0150: zeros stay digits. 5*0 = 0; 0*0 + 5*3 + 0 = 15; 0*3 + 1 = 1 -> 01, 5, 0.
    assert product_scratchpad("05*30=") == "5*0+0=00 0*0+5*3+0=015 0*3+01=01"
    # The largest: 99 x 99 = 9801 (81; 81 + 81 + 8 = 170; 81 + 17 = 98).
    assert product_scratchpad("99*99=") == "9*9+0=81 9*9+9*9+8=170 9*9+17=98"
    assert product_scratchpad("042+517=") == ""  # additions keep their own scratchpad


def test_every_product_thought_is_right_and_graded_on_its_answer():
    data = build_arith(ArithConfig(name="arith", mix={"mul2": 1.0}, think_mul=1.0, n_train=64, n_heldout=64))
    for demo, _ in zip(data.sft_stream(0), range(400)):
        a, b = demo.prompt.rstrip("=").split("*")
        answer = f"{int(a) * int(b):04d}"
        assert demo.answer.startswith("<think>") and demo.answer.endswith("</think>" + answer), demo
        assert _read_scratchpad(demo.answer) == answer, demo
        assert exact_match_reward(demo.answer + "<eos>", answer) == 1.0
        # It closes before length=interrupt's earliest cut, 0.8 x 64 = 51.2 tokens (one character each).
        assert len(demo.answer) - len(answer) <= 51, demo


def test_think_mul_sets_the_share_of_products_that_think_and_only_in_the_first_phase():
    cfg = ArithConfig(name="arith", mix={"add3": 0.8, "mul2": 0.2}, think=0.7, think_final=0.1, think_mul=0.25,
                      n_train=64, n_heldout=64)
    data = build_arith(cfg)
    demos = [d for d, _ in zip(data.sft_stream(3), range(5000))]
    muls = [d for d in demos if d.kind == "mul2"]
    frac = sum(d.answer.startswith("<think>") for d in muls) / len(muls)
    assert 0.21 < frac < 0.29, frac  # 0.25 of about 1000 products: sd 0.014
    assert not any("*" in d.answer for d in demos if d.kind == "add3")  # additions think as before
    final = [d for d, _ in zip(data.sft_final_stream(3), range(2000)) if d.kind == "mul2"]
    assert final and not any("<think>" in d.answer for d in final)
    # Without task.think_final, the final steps still show no product scratchpad.
    plain = build_arith(ArithConfig(name="arith", think_mul=0.5, n_train=64, n_heldout=64))
    final = [d for d, _ in zip(plain.sft_final_stream(3), range(2000)) if d.kind == "mul2"]
    assert final and not any("<think>" in d.answer for d in final)


def test_think_mul_zero_leaves_the_key_as_it_was():
    # That 0 leaves the demonstrations themselves as they were is the shipped warm starts' check
    # (tests/test_warmstart_asset.py: their key fingerprints the first demonstrations of both phases).
    base = dict(name="arith", mix={"add3": 0.8, "mul2": 0.2}, think=0.7, think_final=0.1, n_train=64, n_heldout=64)
    before = build_arith(ArithConfig(**base))
    texts = lambda s: [(d.prompt, d.answer) for d, _ in zip(s(7), range(500))]  # noqa: E731
    # The warm-start key leaves the field out at 0 (the shipped warm starts were built before it existed).
    assert "think_mul" not in task_key(ArithConfig(**base))
    assert task_key(ArithConfig(**base, think_mul=0.02)) == {**task_key(ArithConfig(**base)), "think_mul": 0.02}
    # Any other value changes the first phase's demonstrations, so the key's fingerprint of them too.
    assert texts(build_arith(ArithConfig(**base, think_mul=0.5)).sft_stream) != texts(before.sft_stream)


@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_think_mul_out_of_range_names_the_key(value):
    with pytest.raises(Exception) as e:
        validate(compose(["logger=none", f"task.think_mul={value}"]))
    err = as_config_error(e.value)
    assert err.key == "task.think_mul" and value in str(err), err
