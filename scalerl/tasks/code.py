"""``task=code``: programming problems graded by running their tests in a sandbox.

Records come from a local file. The defaults read DeepCoder's records (``problem``,
``tests``, ``metadata``, ``starter_code``; the code set of arXiv 2510.13786 §5); for
LiveCodeBench's, set ``task.problem_field=question_content`` and
``task.tests_fields=[public_test_cases,private_test_cases]``. The tests field may be a
JSON string or already parsed, in any of the layouts these datasets use:
- a list of ``{"input", "output", "testtype": "stdin" | "functional"}`` (LiveCodeBench,
  DeepCoder's lcbv5; the function name is ``metadata.func_name``);
- a list of ``{"type": "stdin_stdout" | "function_call", "input", "output", "fn_name"}``
  (DeepCoder's primeintellect) or of plain ``{"input", "output"}`` (codeforces);
- ``{"inputs": [...], "outputs": [...], "fn_name"?}`` (DeepCoder's taco, APPS);
- a list of assert statements (MBPP-style ``test_list``), or one string of them;
- LiveCodeBench's compressed private tests (base64 of zlib of a pickled JSON string; the
  unpickler accepts nothing but plain strings).

The completion's code is its last fenced code block after the thinking block. Expected
outputs never enter the sandbox: it returns what the program printed or returned and
the host compares (``outputs_match``), so a program cannot read its way to a pass.
"""
from __future__ import annotations

import base64
import io
import json
import math
import pickle
import re
import zlib
from dataclasses import dataclass, field
from typing import Sequence

from omegaconf import MISSING

from scalerl.core.errors import ConfigError, check
from scalerl.tasks import data
from scalerl.tasks.base import Grades, Problem, TaskConfig, TaskData, reward_value
from scalerl.tasks.prompting import PromptConfig, render
from scalerl.tasks.rewards import final_answer
from scalerl.tasks.sandbox import Job, Sandbox, SandboxConfig

SCORINGS = ("all", "fraction")
CODE_INSTRUCTION = ("\n\nWrite a Python 3 solution. Put the complete program in one ```python code block "
                    "at the end of your answer.")
FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)


@dataclass(frozen=True)
class CodeTests:
    style: str
    """stdio, call or assert (see ``sandbox.Job``)."""
    inputs: tuple[str, ...]
    """stdio: stdin text; call: JSON list of arguments; assert: the assert statement."""
    outputs: tuple[str, ...]
    """stdio: expected stdout; call: JSON of the expected return value; assert: unused ("")."""
    fn_name: str = ""


@dataclass
class CodeConfig(TaskConfig):
    path: str = MISSING
    """Local .jsonl, .json or .parquet file of problems."""
    problem_field: str = "problem"
    """Field holding the statement (DeepCoder: problem; LiveCodeBench: question_content)."""
    tests_fields: list[str] = field(default_factory=lambda: ["tests"])
    """Fields holding tests, concatenated (LiveCodeBench: [public_test_cases, private_test_cases])."""
    metadata_field: str = "metadata"
    """Field holding metadata with ``func_name`` for function-call tests ("" = none)."""
    starter_code_field: str = "starter_code"
    """Field holding starter code shown in the prompt, if present ("" = none)."""
    n_heldout: int = 1000
    """Held-out problems (arXiv 2510.13786 §2: 1,000), capped at half the distinct problems."""
    data_seed: int = 1234
    """Seed of the held-out split; independent of the run seed so every arm sees the same split."""
    max_tests: int = 0
    """Tests run per completion (the first ones; 0 = all)."""
    scoring: str = "all"
    """all: the correct reward only if every test passes; fraction: wrong + passed/total * (correct - wrong)."""
    prompt: PromptConfig = field(default_factory=lambda: PromptConfig(instruction=CODE_INSTRUCTION))
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        data.check_path(self.path)
        check(self.n_heldout > 0, "task.n_heldout", f"must be > 0, got {self.n_heldout}")
        check(self.max_tests >= 0, "task.max_tests", f"must be >= 0, got {self.max_tests}")
        check(self.scoring in SCORINGS, "task.scoring", f"must be one of {SCORINGS}, got {self.scoring!r}")
        check(len(self.tests_fields) > 0, "task.tests_fields", "must name at least one field")

    def imitable(self) -> bool:
        return False  # tests grade a program; there is no reference program to imitate


# ------------------------------------------------------------------ reading records
class _StringsOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset")


def _decode(value):
    """A tests field as Python data: parsed JSON, or LiveCodeBench's compressed form."""
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        inner = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
        return json.loads(inner) if isinstance(inner, (str, bytes)) else inner
    except Exception:
        if isinstance(value, str) and "assert" in value:
            return value
        raise ValueError("neither JSON nor LiveCodeBench's compressed tests") from None


def parse_tests(raw, metadata=None) -> CodeTests:
    """Normalise one record's tests (any layout in the module docstring) to ``CodeTests``.

    >>> parse_tests('[{"input": "1 2\\\\n", "output": "3\\\\n", "testtype": "stdin"}]').style
    'stdio'
    >>> t = parse_tests([{"input": "[1, 2]\\n3", "output": "[1]", "testtype": "functional"}], {"func_name": "f"})
    >>> t.style, t.inputs, t.outputs, t.fn_name
    ('call', ('[[1, 2], 3]',), ('[1]',), 'f')
    >>> parse_tests({"inputs": [[1]], "outputs": [[2]], "fn_name": "g"}).inputs
    ('[1]',)
    >>> parse_tests(["assert f(1) == 2"]).style
    'assert'
    """
    tests, meta = _decode(raw), _decode(metadata) if metadata else {}
    meta = meta if isinstance(meta, dict) else {}
    if isinstance(tests, str):
        return CodeTests("assert", (tests,), ("",))
    if isinstance(tests, dict):
        fn = tests.get("fn_name") or meta.get("func_name") or ""
        ins, outs = list(tests.get("inputs", [])), list(tests.get("outputs", []))
        if fn:
            return CodeTests("call", tuple(json.dumps(a if isinstance(a, list) else [a]) for a in ins),
                             tuple(json.dumps(o) for o in outs), fn)
        return CodeTests("stdio", tuple(map(_text, ins)), tuple(map(_text, outs)))
    if not isinstance(tests, list) or not tests:
        raise ValueError("expected a non-empty list or an inputs/outputs mapping")
    if all(isinstance(t, str) for t in tests):
        return CodeTests("assert", tuple(tests), ("",) * len(tests))
    first = tests[0]
    kind = first.get("testtype") or first.get("type") or "stdin"
    if kind in ("functional", "function_call"):
        fn = first.get("fn_name") or meta.get("func_name") or ""
        if not fn:
            raise ValueError("function-call tests need fn_name (or metadata.func_name)")
        if kind == "functional":  # LiveCodeBench: one JSON value per line, one line per argument
            ins = [json.dumps([json.loads(line) for line in t["input"].split("\n") if line.strip()]) for t in tests]
            outs = [json.dumps(json.loads(t["output"])) for t in tests]
        else:
            ins = [json.dumps(t["input"] if isinstance(t["input"], list) else [t["input"]]) for t in tests]
            outs = [json.dumps(t["output"]) for t in tests]
        return CodeTests("call", tuple(ins), tuple(outs), fn)
    return CodeTests("stdio", tuple(_text(t["input"]) for t in tests), tuple(_text(t["output"]) for t in tests))


def _text(value) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def load_problems(cfg: CodeConfig, tokenizer=None, task: str = "code") -> tuple[list[Problem], list[Problem]]:
    rows, seen, problems = data.read_records(cfg.path), set(), []
    for i, row in enumerate(rows):
        where = f"{cfg.path} row {i}"
        text = str(data.field(row, cfg.problem_field, "task.problem_field", where))
        if text in seen:
            continue
        seen.add(text)
        meta = row.get(cfg.metadata_field) if cfg.metadata_field else None
        parts = []
        for name in cfg.tests_fields:
            raw = data.field(row, name, "task.tests_fields", where)
            if raw in (None, "", []):
                continue
            try:
                parts.append(parse_tests(raw, meta))
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError("task.tests_fields", f"{where}, field {name!r}: cannot read its tests ({e})") from None
        if not parts:
            continue  # nothing to grade with
        tests = CodeTests(parts[0].style, sum((p.inputs for p in parts), ()), sum((p.outputs for p in parts), ()),
                          parts[0].fn_name)
        if cfg.max_tests:
            tests = CodeTests(tests.style, tests.inputs[: cfg.max_tests], tests.outputs[: cfg.max_tests], tests.fn_name)
        starter = row.get(cfg.starter_code_field) if cfg.starter_code_field else None
        shown = text + (f"\n\nStarter code:\n```python\n{starter}\n```" if starter else "")
        problems.append(Problem(prompt=render(cfg.prompt, shown, tokenizer), answer="", task=task, tests=tests,
                                uid=f"{i}:{data.fingerprint(text, tests.inputs, tests.outputs)}"))
    check(len(problems) >= 2, "task.path", f"{cfg.path!r} has {len(problems)} problems with tests; need at least 2")
    train, held = data.split(len(problems), cfg.n_heldout, cfg.data_seed)
    return [problems[i] for i in train], [problems[i] for i in held]


# ------------------------------------------------------------------ grading
def extract_code(completion: str, prompt: str = "") -> str | None:
    """The last fenced code block of the answer part (None: no answer or no block).

    >>> extract_code("<think>```python\\nx\\n```</think>Here:\\n```python\\nprint(1)\\n```")
    'print(1)\\n'
    >>> extract_code("<think>```python\\nprint(1)\\n```") is None
    True
    """
    text = final_answer(completion, prompt)
    if text is None:
        return None
    blocks = FENCE.findall(text)
    return blocks[-1][1] if blocks else None


def _number(token: str):
    try:
        return float(token)
    except ValueError:
        return None


def outputs_match(got: str, expected: str) -> bool:
    """Printed output against the expected: line by line ignoring trailing whitespace,
    else token by token with numbers equal to 1e-6 (relative or absolute).

    >>> outputs_match("3 \\n\\n", "3")
    True
    >>> outputs_match("0.3333333", "0.33333333")
    True
    >>> outputs_match("4", "3")
    False
    """
    norm = lambda s: "\n".join(line.rstrip() for line in s.strip().splitlines())
    if norm(got) == norm(expected):
        return True
    a, b = got.split(), expected.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        fx, fy = _number(x), _number(y)
        if fx is None or fy is None or not math.isclose(fx, fy, rel_tol=1e-6, abs_tol=1e-6):
            return False
    return True


def result_matches(got: str, expected: str) -> bool:
    """A returned value (JSON) against the expected one; taco-style tests wrap it in a list."""
    try:
        value, want = json.loads(got), json.loads(expected)
    except ValueError:
        return False
    return value == want or [value] == want


def passed(tests: CodeTests, runs) -> list[bool]:
    out = []
    for i, run in enumerate(runs):
        if run.status != "ok":
            out.append(False)
        elif tests.style == "stdio":
            out.append(outputs_match(run.stdout, tests.outputs[i]))
        elif tests.style == "call":
            out.append(result_matches(run.result, tests.outputs[i]))
        else:
            out.append(run.result == "ok")
    return out + [False] * (len(tests.inputs) - len(out))


def build_code(cfg: CodeConfig, *, tokenizer=None) -> TaskData:
    train, heldout = load_problems(cfg, tokenizer)
    box: list[Sandbox] = []  # made on first use: probing bubblewrap costs a process start

    def score(texts: Sequence[str], problems: Sequence[Problem]) -> Grades:
        if not box:
            box.append(Sandbox(cfg.sandbox))
        codes = [extract_code(t, p.prompt) for t, p in zip(texts, problems)]
        todo = [i for i, c in enumerate(codes) if c is not None]
        jobs = [Job(codes[i], problems[i].tests.style, problems[i].tests.inputs, problems[i].tests.fn_name) for i in todo]
        results = dict(zip(todo, box[0].map(jobs)))
        reward, correct, timeout, crash = [], [], [], []
        for i, p in enumerate(problems):
            res = results.get(i)
            ok = passed(p.tests, res.tests) if res is not None else [False] * len(p.tests.inputs)
            frac = sum(ok) / max(1, len(ok))
            correct.append(bool(ok) and all(ok))
            reward.append(reward_value(cfg, frac if cfg.scoring == "fraction" else float(correct[-1])))
            timeout.append(res is not None and (res.status == "timeout" or any(t.status == "timeout" for t in res.tests)))
            crash.append(res is not None and (res.status == "crash" or any(t.status == "error" for t in res.tests)))
        return Grades(reward=reward, correct=correct, flags={"timeout": timeout, "crash": crash})

    return TaskData(train=train, heldout=heldout, score=score, sft_stream=None, names=("code",),
                    flags={"code": ("timeout", "crash")},
                    correct_reward=cfg.correct_reward, wrong_reward=cfg.wrong_reward)
