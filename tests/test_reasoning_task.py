"""The embedded task's reasoning shape (``task.think``; docs/embedded.md): scratchpads worked out
by hand, demonstrations that are always right, grading that reads only the answer after the
thinking, and the length axis acting on the thinking part of the default's completions."""
from __future__ import annotations

import random

import pytest

from scalerl.core.jsonio import JsonlFile
from scalerl.tasks.arith import ArithConfig, ProblemStream, build_arith, demonstration, make_problem, scratchpad
from scalerl.length.interrupt import PAPER_PHRASE
from scalerl.tasks.rewards import exact_match_reward
from scalerl.train.loop import train


def test_scratchpads_by_hand():
    # 999 + 001: every column carries. Column sums (digit + digit + carry in = two digits):
    # 9+1+0 = 10, 9+0+1 = 10, 9+0+1 = 10; the answer reads the carries and last digits: 1000.
    assert scratchpad("999+001=") == "9+1+0=10 9+0+1=10 9+0+1=10"
    assert demonstration(make_problem("add3", random.Random(0)), True).answer.startswith("<think>")
    # 042 + 517: no carries. 2+7 = 9, 4+1 = 5, 0+5 = 5 -> 0559.
    assert scratchpad("042+517=") == "2+7+0=09 4+1+0=05 0+5+0=05"
    assert scratchpad("37*41=") == ""  # products have no scratchpad: they stay the task's ceiling


def _read_scratchpad(trace: str) -> str:
    """The answer a scratchpad implies: the last carry, then the columns' last digits, most significant first."""
    body = trace.split("<think>", 1)[1].split("</think>", 1)[0]
    cols = [c.split("=")[1] for c in body.split(" ")]
    return cols[-1][0] + "".join(c[1] for c in reversed(cols))


def test_every_thinking_demonstration_is_right_and_graded_on_its_answer():
    stream = ProblemStream({"add3": 1.0, "mul2": 0.25}, seed=5)
    seen = {"add3": 0, "mul2": 0}
    for _ in range(300):
        p = next(stream)
        demo = demonstration(p, True)
        seen[p.kind] += 1
        assert exact_match_reward(demo.answer + "<eos>", p.answer) == 1.0
        if p.kind == "add3":
            assert _read_scratchpad(demo.answer) == p.answer, demo.answer
        else:
            assert demo.answer == p.answer
    assert min(seen.values()) > 20
    # The grader reads only what follows the thinking: an unclosed scratchpad has no answer.
    assert exact_match_reward("<think>2+7+0=09 4+1+0=05", "0559") == 0.0
    assert exact_match_reward("<think>2+7+0=09</think>0558<eos>", "0559") == 0.0
    assert exact_match_reward("0559<eos>", "0559") == 1.0


def test_an_interrupted_demonstration_answers_right_after_the_papers_phrase():
    p = make_problem("add3", random.Random(1))
    demo = demonstration(p, True, cut=2).answer
    # Two of three columns, then the phrase (which ends the thought), then the full answer.
    assert demo.count("=") == 2 and demo.endswith(PAPER_PHRASE + p.answer), demo
    assert exact_match_reward(demo + "<eos>", p.answer) == 1.0
    data = build_arith(ArithConfig(name="arith", mix={"add3": 1.0}, think=1.0, interrupted=0.5, n_train=8, n_heldout=8))
    cut = sum(PAPER_PHRASE in d.answer for d, _ in zip(data.sft_stream(0), range(1000)))
    assert 430 < cut < 570, cut


def test_the_think_fraction_sets_how_many_demonstrations_think():
    data = build_arith(ArithConfig(name="arith", mix={"add3": 0.8, "mul2": 0.2}, think=0.3, n_train=64, n_heldout=64))
    demos = [d for d, _ in zip(data.sft_stream(3), range(4000))]
    adds = [d for d in demos if d.kind == "add3"]
    frac = sum(d.answer.startswith("<think>") for d in adds) / len(adds)
    assert 0.26 < frac < 0.34, frac
    assert not any(d.answer.startswith("<think>") for d in demos if d.kind == "mul2")
    none = build_arith(ArithConfig(name="arith", think=0.0, n_train=64, n_heldout=64))
    assert not any("<think>" in d.answer for d, _ in zip(none.sft_stream(3), range(500)))


def test_the_final_demonstrations_think_briefly_unless_they_think_through():
    # The warm start's last steps (model.warmstart.final_steps): task.think_final of the additions think
    # through every column (some of those cut by the phrase, task.interrupted); every other one writes
    # its first one or two columns, closes the thought and answers: always right, but a policy that
    # imitates it has too little scratchpad for the higher digits (docs/embedded.md).
    data = build_arith(ArithConfig(name="arith", mix={"add3": 0.8, "mul2": 0.2}, think=0.7, think_final=0.2,
                                   n_train=64, n_heldout=64))
    adds = [d for d, _ in zip(data.sft_final_stream(3), range(5000)) if d.kind == "add3"]
    through = [d for d in adds if PAPER_PHRASE in d.answer or d.answer.split("</think>")[0].count("=") == 3]
    brief = [d for d in adds if d not in through]
    assert 0.17 < len(through) / len(adds) < 0.23, len(through) / len(adds)
    assert {d.answer.split("</think>")[0].count("=") for d in brief} == {1, 2}
    for d in brief[:200]:
        thought, answer = d.answer.split("</think>")
        assert thought.startswith("<think>") and scratchpad(d.prompt).startswith(thought[len("<think>"):])
        a, b = d.prompt.rstrip("=").split("+")
        assert answer == f"{int(a) + int(b):04d}" and exact_match_reward(d.answer + "<eos>", answer) == 1.0
    # Without task.think_final the final steps imitate the first phase's demonstrations.
    assert build_arith(ArithConfig(name="arith", n_train=64, n_heldout=64)).sft_final_stream is None


@pytest.fixture
def default_cfg():
    """The default config (the reasoning shape), unlike ``tiny_cfg``'s answers-only shape."""
    from scalerl.config import compose, validate

    return lambda *overrides: validate(compose(["logger=none", "train.threads=1", *overrides]))


def _rows(default_cfg, tmp_path, name, *overrides):
    run_dir = tmp_path / name
    train(default_cfg(*overrides), run_dir, run_name=name, group="test", config_dict={})
    return JsonlFile(run_dir / "metrics.jsonl").rows()


@pytest.mark.slow
def test_the_length_axis_acts_on_the_defaults_thinking(default_cfg, tmp_path):
    """On the default (reasoning) shape: completions think for a few dozen tokens, the truncation rate
    answers to length.max_new_tokens, and an interruption closes a cut-off thought with an answer."""
    one = ["train.steps=1", "train.eval_every=1", "train.eval_samples=1", "async=sync"]
    full = _rows(default_cfg, tmp_path, "full", *one, "length=truncate")
    mid = _rows(default_cfg, tmp_path, "mid", *one, "length=truncate", "length.max_new_tokens=40")
    short = _rows(default_cfg, tmp_path, "short", *one, "length=truncate", "length.max_new_tokens=20")
    cut = _rows(default_cfg, tmp_path, "cut", *one, "length=interrupt", "length.max_new_tokens=20")
    r_full, r_mid, r_short, r_cut = full[0], mid[0], short[0], cut[0]
    print(f"\nstep 0: full {r_full}\nmid {r_mid}\nshort {r_short}\ncut {r_cut}\nstep 1 interrupt_rate {cut[1]['interrupt_rate']}")
    assert r_full["response_length/arith"] >= 24  # the median completion thinks (docs/embedded.md)
    # The truncation rate answers to the budget: at 64 almost no thought is cut (0-0.2%, with the
    # warm start's CPU kernels), at 40 the longer ones are (a three-digit thought is 45 tokens), at
    # 20 every thought is.
    assert r_full["truncation_rate/arith"] < 0.15 < 0.5 < r_short["truncation_rate/arith"]
    assert r_full["truncation_rate/arith"] < r_mid["truncation_rate/arith"] < 0.5
    # Interrupted at 16-20 tokens, a thought is closed by the phrase and answered within the answer
    # budget instead of running out (a first column is too little scratchpad for a right answer):
    # most of what truncation would cut ends with an answer. How many answers still overrun the answer
    # budget is the warm start's, so its CPU kernels' (0.05-0.18 of them on the kinds seen so far).
    assert r_cut["truncation_rate/arith"] < 0.5 * r_short["truncation_rate/arith"]
    assert r_cut["response_length/arith"] > r_short["response_length/arith"] + 30  # the phrase and the answer
    assert cut[1]["interrupt_rate"] > 0.2


def test_a_mix_too_small_for_its_splits_is_refused_before_it_can_hang():
    # 'task.mix={add3:0}' leaves the default's mul2 alone: 100 x 100 = 10,000 distinct products,
    # fewer than the 32,768 + 512 prompts the splits need (drawing them used to loop forever).
    from scalerl.config import compose, validate
    from scalerl.core.errors import ConfigError

    with pytest.raises(ConfigError, match="task.mix.*10000 distinct problems"):
        validate(compose(["task.mix={add3:0}"]))
    assert validate(compose(["task.mix={add3:0}", "task.n_train=9000"])).task.n_train == 9000
