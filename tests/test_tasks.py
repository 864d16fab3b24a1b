"""Real tasks on small real-format files the tests write: loaders (JSONL, JSON, Parquet),
the held-out split, prompting, math grading with math-verify, code grading in the sandbox,
the mix, and config errors that name the key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO
from omegaconf import OmegaConf
from taskdata import ADD_STDIO, MATH_ROWS, deepcoder_rows, livecodebench_rows, write_jsonl, write_parquet

from scalerl.config import ConfigError, as_config_error, compose, validate
from scalerl.tasks import TASKS
from scalerl.tasks.math import MathConfig, is_correct
from scalerl.tasks.prompting import PromptConfig, render


def task_cfg(*overrides):
    # No warm start: a task's own settings are checked, and code has no answers to imitate.
    return validate(compose(["logger=none", "model.warmstart.enabled=false", *overrides])).task


def build(cfg, tokenizer=None):
    return TASKS[cfg.name].fn(cfg, tokenizer=tokenizer)


@pytest.fixture
def polaris(tmp_path):
    return {"jsonl": write_jsonl(tmp_path / "polaris.jsonl", MATH_ROWS),
            "parquet": write_parquet(tmp_path / "polaris.parquet", MATH_ROWS),
            "json": _write_json(tmp_path / "polaris.json", MATH_ROWS)}


def _write_json(path: Path, rows) -> Path:
    path.write_text(json.dumps(rows))
    return path


# ------------------------------------------------------------------ math grading
@pytest.mark.parametrize("completion,answer,ok", [
    ("\\boxed{1/2}", "\\frac{1}{2}", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{\\dfrac12}", "1/2", True),
    ("<think>maybe 1/3... no</think>The answer is \\boxed{0.5}.", "1/2", True),
    ("\\boxed{3\\sqrt{2}}", "\\sqrt{18}", True),
    ("\\boxed{0.4}", "1/2", False),  # wrong
    ("\\boxed{2}", "1/2", False),
    ("The answer is one half.", "1/2", False),  # no answer in the format
    ("", "1/2", False),
    ("\\boxed{}", "1/2", False),
    ("\\boxed{junk}}}{{\\frac{", "1/2", False),  # junk
    ("\\boxed{\\frac{1}{", "1/2", False),  # unclosed box
    ("}{}{$$$\\\\\\\\ \\boxed{\\left(}", "1/2", False),
    ("<think>it is \\boxed{1/2}</think>I am not sure.", "1/2", False),  # answer inside the thinking only
    ("<think>it is \\boxed{1/2}", "1/2", False),  # thinking never closed: no answer
])
def test_math_grading(completion, answer, ok):
    assert is_correct(completion, answer) is ok


def test_math_answer_format_any_and_open_thinking_in_prompt():
    assert is_correct("so it is 1/2", "0.5", answer_format="any")
    assert not is_correct("so it is 1/2", "0.5", answer_format="boxed")
    # a chat template that opens the thinking block in the prompt: a completion that never closes it has no answer
    assert not is_correct("\\boxed{1/2}", "1/2", prompt="<|im_start|>assistant\n<think>\n")
    assert is_correct("hmm</think>\\boxed{1/2}", "1/2", prompt="<|im_start|>assistant\n<think>\n")


def test_math_rewards_use_the_configured_values(polaris):
    cfg = task_cfg("task=math", f"task.path={polaris['jsonl']}", "task.n_heldout=4", "task.wrong_reward=-1")
    t = build(cfg)
    p = t.train[0]
    g = t.score([f"\\boxed{{{p.answer}}}", "\\boxed{-12345}", "<think>never closed", "no box"], [p] * 4)
    assert g.reward == [1.0, -1.0, -1.0, -1.0] and g.correct == [True, False, False, False]


# ------------------------------------------------------------------ loaders and split
@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "json"])
def test_math_loader_and_split(polaris, fmt):
    cfg = task_cfg("task=math", f"task.path={polaris[fmt]}", "task.n_heldout=5")
    t = build(cfg)
    assert len(t.heldout) == 5 and len(t.train) == len(MATH_ROWS) - 5
    assert not {p.prompt for p in t.heldout} & {p.prompt for p in t.train}
    answers = {r["problem"]: r["answer"] for r in MATH_ROWS}
    for p in t.train + t.heldout:
        problem = p.prompt.split(" Let's think")[0]
        assert answers[problem] == p.answer and "\\boxed{}" in p.prompt and p.task == "math"
    # the split depends on the data and task.data_seed only: every format and arm gets the same
    again = build(task_cfg("task=math", f"task.path={polaris['jsonl']}", "task.n_heldout=5", "seed=7"))
    assert [p.uid for p in again.heldout] == [p.uid for p in t.heldout]
    other = build(task_cfg("task=math", f"task.path={polaris['jsonl']}", "task.n_heldout=5", "task.data_seed=9"))
    assert [p.uid for p in other.heldout] != [p.uid for p in t.heldout]


def test_heldout_default_is_1000_capped_by_the_data(polaris):
    cfg = task_cfg("task=math", f"task.path={polaris['jsonl']}")
    assert cfg.n_heldout == 1000
    t = build(cfg)
    assert len(t.heldout) == len(MATH_ROWS) // 2 and len(t.train) == len(MATH_ROWS) - len(MATH_ROWS) // 2


def test_custom_field_names(tmp_path):
    rows = [{"question": r["problem"], "solution": r["answer"]} for r in MATH_ROWS]
    path = write_jsonl(tmp_path / "other.jsonl", rows)
    t = build(task_cfg("task=math", f"task.path={path}", "task.problem_field=question", "task.answer_field=solution"))
    assert len(t.train) + len(t.heldout) == len(rows)
    with pytest.raises(ConfigError) as e:
        build(task_cfg("task=math", f"task.path={path}"))
    assert e.value.key == "task.problem_field" and "question" in str(e.value)


@pytest.mark.parametrize("overrides,key", [
    (["task=math"], "task.path"),
    (["task=math", "task.path=/nonexistent/x.jsonl"], "task.path"),
    (["task=math", "task.path=README.md"], "task.path"),
    (["task=code", "task.path=/nonexistent/x.parquet"], "task.path"),
    (["task=arith", "task.wrong_reward=1"], "task.correct_reward"),
    (["task=mix"], "task.tasks.math.path"),
    (["task=mix", "task.tasks.math.path=README.md"], "task.tasks.math.path"),
    (["task=mix", "task.tasks.math.foo=1"], "task.tasks.math.foo"),
    (["task=mix", "~task.tasks.code", f"task.tasks.math.path={REPO / 'tests/data/curve_20steps.json'}"], "task.weights.code"),
    (["task=code", "task.path=README.md", "task.sandbox.isolation=docker"], "task.sandbox.isolation"),
    (["task=math", "task.path=README.md", "task.prompt.template=jinja"], "task.prompt.template"),
])
def test_bad_task_config_names_the_key(overrides, key):
    with pytest.raises(Exception) as e:
        validate(compose(overrides))
    assert as_config_error(e.value).key == key, as_config_error(e.value)


# ------------------------------------------------------------------ prompting
class ChatTok:
    """A stand-in for a tokenizer with a chat template (no hub access here)."""
    chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|><think>"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<|{m['role']}|>{m['content']}" for m in messages) + "<|assistant|><think>"


def test_prompting_chat_template_plain_and_system():
    cfg = PromptConfig(system="You are precise.", instruction=" Box it.")
    assert render(cfg, "1+1?", ChatTok()) == "<|system|>You are precise.<|user|>1+1? Box it.<|assistant|><think>"
    assert render(cfg, "1+1?", None) == "You are precise.1+1? Box it."
    plain = PromptConfig(template="plain", plain="Q: {problem}\nA:", instruction="")
    assert render(plain, "1+1?", ChatTok()) == "Q: 1+1?\nA:"
    with pytest.raises(ConfigError) as e:
        render(PromptConfig(template="chat"), "1+1?", None)
    assert e.value.key == "task.prompt.template"


def test_math_prompts_use_the_tokenizer_chat_template(polaris):
    cfg = task_cfg("task=math", f"task.path={polaris['jsonl']}", "task.prompt.system=Think first.")
    t = build(cfg, ChatTok())
    p = t.heldout[0]
    assert p.prompt.startswith("<|system|>Think first.<|user|>What is") and p.prompt.endswith("<|assistant|><think>")
    # the prompt opened the thinking block: an answer before </think> is no answer
    assert t.score(["\\boxed{" + p.answer + "}"], [p]).correct == [False]
    assert t.score(["ok</think>\\boxed{" + p.answer + "}"], [p]).correct == [True]


# ------------------------------------------------------------------ code
SOLUTIONS = {  # a correct solution per DeepCoder row, by the start of its problem text
    "Read two": ADD_STDIO,
    "Return the two": "class Solution:\n    def sortTwo(self, a, b):\n        return sorted([a, b])\n",
    "Print the input": "print(input()[::-1])\n",
    "Write double": "def double(x):\n    return 2 * x\n",
    "Print the square": "n = int(input())\nprint(n * n)\n",
    "Write is_even": "def is_even(n):\n    return n % 2 == 0\n",
    "Given A and B": ADD_STDIO,
    "Return the larger": "class Solution:\n    def larger(self, a, b):\n        return max(a, b)\n",
}


def fenced(code: str) -> str:
    return f"<think>easy</think>Here it is:\n```python\n{code}```"


def solution_for(problem) -> str:
    return next(code for start, code in SOLUTIONS.items() if start in problem.prompt)


@pytest.mark.system  # grading runs the code under bubblewrap (task.sandbox.isolation=auto), an apt package
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_deepcoder_records_load_and_grade(tmp_path, fmt):
    rows = deepcoder_rows()
    path = (write_jsonl if fmt == "jsonl" else write_parquet)(tmp_path / f"deepcoder.{fmt}", rows)
    cfg = task_cfg("task=code", f"task.path={path}", "task.n_heldout=2", "task.sandbox.workers=2")
    t = build(cfg)
    problems = t.train + t.heldout
    assert len(problems) == len(rows) and len(t.heldout) == 2
    styles = sorted(p.tests.style for p in problems)
    assert styles == ["assert", "call", "call", "stdio", "stdio", "stdio"]
    good = [fenced(solution_for(p)) for p in problems]
    g = t.score(good, problems)
    assert g.correct == [True] * len(problems) and g.reward == [1.0] * len(problems)
    assert g.flags == {"timeout": [False] * len(problems), "crash": [False] * len(problems)}
    # wrong code, no code, code only inside the thinking, a crash and a timeout
    p = next(p for p in problems if p.prompt.startswith("Read two"))
    bad = [fenced("print(0)\n"), "I would add them.", "<think>```python\n" + ADD_STDIO + "```", fenced("raise SystemError\n"),
           fenced("while True:\n    pass\n")]
    cfg_fast = task_cfg("task=code", f"task.path={path}", "task.n_heldout=2", "task.sandbox.timeout_s=1", "task.sandbox.cpu_s=1")
    g = build(cfg_fast).score(bad, [p] * len(bad))
    assert g.correct == [False] * 5 and g.reward == [0.0] * 5
    assert g.flags["crash"] == [False, False, False, True, False] and g.flags["timeout"] == [False, False, False, False, True]


@pytest.mark.system  # grades code under bubblewrap
def test_code_fraction_scoring_gives_partial_credit(tmp_path):
    path = write_jsonl(tmp_path / "deepcoder.jsonl", deepcoder_rows())
    t = build(task_cfg("task=code", f"task.path={path}", "task.scoring=fraction", "task.wrong_reward=-1"))
    p = next(p for p in t.train + t.heldout if p.prompt.startswith("Read two"))  # tests: 1 2 -> 3, 5 -7 -> -2
    g = t.score([fenced("a, b = map(int, input().split())\nprint(abs(a + b))\n")], [p])
    assert g.reward == [0.0] and g.correct == [False]  # -1 + 0.5 * (1 - (-1))


@pytest.mark.system  # grades code under bubblewrap
def test_livecodebench_records_with_compressed_private_tests(tmp_path):
    path = write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows() * 1)
    t = build(task_cfg("task=code", f"task.path={path}", "task.problem_field=question_content",
                       "task.tests_fields=[public_test_cases,private_test_cases]", "task.n_heldout=1"))
    problems = t.train + t.heldout
    assert sorted(len(p.tests.inputs) for p in problems) == [2, 2]  # public + private
    assert any("Starter code" in p.prompt and "def larger" in p.prompt for p in problems)
    g = t.score([fenced(solution_for(p)) for p in problems], problems)
    assert g.correct == [True, True]
    # the private test is graded: a solution that only fits the public one fails
    p = next(p for p in problems if "A+B" in p.prompt)
    assert t.score([fenced("print(3)\n")], [p]).correct == [False]


def test_code_needs_no_warm_start_answers(tmp_path):
    path = write_jsonl(tmp_path / "deepcoder.jsonl", deepcoder_rows())
    assert build(task_cfg("task=code", f"task.path={path}")).sft_stream is None


# ------------------------------------------------------------------ mix
@pytest.mark.system  # grades code under bubblewrap
def test_mix_weights_heldout_per_task_and_routing(polaris, tmp_path):
    code = write_jsonl(tmp_path / "deepcoder.jsonl", deepcoder_rows())
    cfg = task_cfg("task=mix", f"task.tasks.math.path={polaris['parquet']}", f"task.tasks.code.path={code}",
                   "task.weights.math=3", "task.weights.code=1", "task.tasks.math.n_heldout=4",
                   "task.tasks.code.n_heldout=2", "task.wrong_reward=-1")
    assert isinstance(cfg.tasks["math"], MathConfig) and cfg.tasks["code"].wrong_reward == -1
    t = build(cfg)
    assert t.names == ("math", "code") and t.flags == {"code": ("timeout", "crash")}
    counts = {k: sum(p.task == k for p in t.train) for k in t.names}
    assert counts["math"] == 3 * counts["code"] or abs(counts["math"] / (counts["math"] + counts["code"]) - 0.75) < 0.05
    assert [p.task for p in t.heldout].count("math") == 4 and [p.task for p in t.heldout].count("code") == 2
    m = next(p for p in t.heldout if p.task == "math")
    c = next(p for p in t.heldout if p.task == "code")
    g = t.score([f"\\boxed{{{m.answer}}}", fenced(solution_for(c)), "\\boxed{-1}"], [m, c, m])
    assert g.correct == [True, True, False] and g.reward == [1.0, 1.0, -1.0]
    assert g.flags == {"crash": [False, False, False], "timeout": [False, False, False]}
    assert next(t.sft_stream(0)).task == "math"  # code has no warm-start targets


def test_mix_can_hold_the_embedded_task_and_compose_on_the_command_line(polaris):
    cfg = task_cfg("task=mix", "~task.tasks.code", "~task.weights.code", f"task.tasks.math.path={polaris['jsonl']}",
                   "+task@task.tasks.sums=arith", "task.tasks.sums.n_train=64", "task.tasks.sums.n_heldout=8")
    t = build(cfg)
    assert t.names == ("math", "sums") and sum(p.task == "sums" for p in t.heldout) == 8
    assert OmegaConf.to_container(compose(["task=mix"]).task.tasks)["code"]["name"] == "code"
    with pytest.raises(ConfigError) as e:
        task_cfg("task=mix", f"task.tasks.math.path={polaris['jsonl']}", "task.tasks.code.path=missing.jsonl")
    assert e.value.key == "task.tasks.code.path"


def test_a_prompt_that_starts_with_bos_gets_no_second_one():
    """Chat templates often write BOS themselves; the rollout must not prepend another."""
    from scalerl.train.rollout import encode_prompt

    class Tok:
        bos_token_id = 1

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [1 if w == "<s>" else 7 for w in text.split()]}

    assert encode_prompt(Tok(), "<s> hi there") == [1, 7, 7]
    assert encode_prompt(Tok(), "hi there") == [1, 7, 7]


def test_derived_epochs_are_unknown_for_file_tasks(polaris):
    from scalerl.config.derive import derive

    d = derive(validate(compose(["task=math", f"task.path={polaris['jsonl']}"])))
    assert d.steps_per_epoch == 0 and d.epochs == 0  # known only once the file is read
    assert derive(validate(compose(["task=arith", "task.n_train=64", "batch.prompts=16"]))).steps_per_epoch == 4
