"""Small task files in the real formats, written by the tests themselves (nothing is
downloaded): Polaris-style math records, DeepCoder- and LiveCodeBench-style code records."""
from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

# Polaris-53K rows: problem, answer, difficulty (the pass rate of a reference model).
MATH_ROWS = [
    {"problem": f"What is {a}+{b}?", "answer": str(a + b), "difficulty": "3/8"} for a in range(1, 7) for b in range(1, 5)
] + [
    {"problem": "What is half of 1?", "answer": "\\frac{1}{2}", "difficulty": "8/8"},
    {"problem": "Simplify sqrt(18).", "answer": "3\\sqrt{2}", "difficulty": "5/8"},
]

ADD_STDIO = "a, b = map(int, input().split())\nprint(a + b)\n"


def deepcoder_rows() -> list[dict]:
    """DeepCoder-Preview rows: problem, tests (a JSON string), metadata (JSON), starter_code."""
    return [
        # lcbv5: LiveCodeBench-style stdin tests
        {"problem": "Read two integers and print their sum.",
         "tests": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                              {"input": "5 -7\n", "output": "-2\n", "testtype": "stdin"}]),
         "metadata": json.dumps({}), "starter_code": ""},
        # lcbv5: functional tests (one JSON value per line), the name in metadata.func_name
        {"problem": "Return the two numbers sorted.",
         "tests": json.dumps([{"input": "3\n1", "output": "[1, 3]", "testtype": "functional"},
                              {"input": "2\n9", "output": "[2, 9]", "testtype": "functional"}]),
         "metadata": json.dumps({"func_name": "sortTwo"}),
         "starter_code": "class Solution:\n    def sortTwo(self, a: int, b: int) -> list:\n        "},
        # primeintellect: stdin_stdout
        {"problem": "Print the input reversed.",
         "tests": json.dumps([{"type": "stdin_stdout", "input": "abc\n", "output": "cba\n"},
                              {"type": "stdin_stdout", "input": "xy\n", "output": "yx\n"}]),
         "metadata": json.dumps({}), "starter_code": ""},
        # primeintellect: function_call
        {"problem": "Write double(x).",
         "tests": json.dumps([{"type": "function_call", "fn_name": "double", "input": [4], "output": [8]},
                              {"type": "function_call", "fn_name": "double", "input": [0], "output": [0]}]),
         "metadata": json.dumps({}), "starter_code": ""},
        # taco: inputs/outputs lists
        {"problem": "Print the square of n.",
         "tests": json.dumps({"inputs": ["3\n", "4\n"], "outputs": ["9\n", "16\n"]}),
         "metadata": json.dumps({}), "starter_code": ""},
        # MBPP-style assert list
        {"problem": "Write is_even(n).", "tests": json.dumps(["assert is_even(2)", "assert not is_even(3)"]),
         "metadata": json.dumps({}), "starter_code": ""},
    ]


def lcb_private(tests: list[dict]) -> str:
    """LiveCodeBench's compressed private tests: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def livecodebench_rows() -> list[dict]:
    """code_generation_lite rows: question_content, starter_code, public/private test cases, metadata."""
    return [
        {"question_id": "abc001_a", "question_title": "Sum", "platform": "atcoder", "difficulty": "easy",
         "question_content": "Given A and B, print A+B.", "starter_code": "",
         "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
         "private_test_cases": lcb_private([{"input": "10 20\n", "output": "30\n", "testtype": "stdin"}]),
         "metadata": json.dumps({})},
        {"question_id": "lc-1", "question_title": "Max", "platform": "leetcode", "difficulty": "easy",
         "question_content": "Return the larger of a and b.",
         "starter_code": "class Solution:\n    def larger(self, a: int, b: int) -> int:\n        ",
         "public_test_cases": json.dumps([{"input": "1\n2", "output": "2", "testtype": "functional"}]),
         "private_test_cases": lcb_private([{"input": "7\n-1", "output": "7", "testtype": "functional"}]),
         "metadata": json.dumps({"func_name": "larger"})},
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path
