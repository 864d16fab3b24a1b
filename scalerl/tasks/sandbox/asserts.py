"""Assert-style tests judged on the host, on plain values.

An assert run inside the program's process proves nothing: ``assert f(x) == y`` passes
when ``f`` returns an object whose ``__eq__`` always says yes. So each top-level
``assert`` of a test is split here, on the host, into its *operands* (``f(x)``: anything
this module does not evaluate itself), which the harness evaluates inside the sandbox
and sends back as plain values of exact built-in types (``harness._plain``), and the
*check* around them (``== y``, ``and``, ``not``, ``abs``, ``len``, ``sorted``,
``math.isclose``, arithmetic), which ``judge`` evaluates here on those values.

What this guarantees: a comparison written at the top level of an assert, against values
written in the test (literals, arithmetic on them), cannot pass unless the program's
values are equal to them. What it does not: comparisons the test writes inside a
comprehension, generator or lambda (``all(f(i) == i for i in r)``), or inside a loop or
function of the test, run inside the program's process (the whole expression is one
operand), and so does a comparison of two values both computed in the sandbox. Every
operand is evaluated, left to right, even where ``and``/``or`` would skip it.

>>> steps, checks = split_asserts("x = 3\\nassert f(x) == [1, 2], 'msg'")
>>> steps
[['exec', 'x = 3'], ['eval', [['f(x)', False]]]]
>>> judge(checks, [[[1, 2]]]), judge(checks, [[[1, 3]]])
(True, False)
>>> judge(split_asserts("assert not g(1) and abs(h(2) - 0.5) < 1e-9")[1], [[False, 0.5]])
True
"""
from __future__ import annotations

import ast
import json
import math
from typing import Any

# Built-ins the check may call on plain values; those taking an iterable let the operand be
# any iterable (a generator, a map): the harness sends its items.
_ITERABLE_FUNCS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "sorted": sorted,
                   "min": min, "max": max}
_FUNCS = {**_ITERABLE_FUNCS, "abs": abs, "round": round, "len": len, "int": int, "float": float, "str": str,
          "bool": bool, "sum": lambda items: sum(items)}  # no start value: sum(lists, []) is quadratic
_BINOPS = (ast.Add, ast.Sub, ast.Div, ast.FloorDiv, ast.Mult, ast.Mod)
_UNARY = (ast.Not, ast.USub, ast.UAdd)


class _Isclose:
    isclose = staticmethod(math.isclose)


def _numbers(op: str):
    """``*`` and ``%`` on numbers only: ``"a" * f()`` or ``"%*d" % ...`` could fill the host's memory."""
    def apply(a, b):
        if not all(type(v) in (bool, int, float, complex) for v in (a, b)):
            raise TypeError(f"the check applies {op} to numbers only")
        return a * b if op == "*" else a % b
    return apply


_NAMES = {**_FUNCS, "math": _Isclose, "_mul": _numbers("*"), "_mod": _numbers("%")}


class _Split(ast.NodeTransformer):
    """Replaces every operand by a name ``_v<i>``; keeps (and rewrites) what the host evaluates."""

    def __init__(self):
        self.operands: list[list] = []  # [source, iterable]

    def operand(self, node: ast.AST, iterable: bool = False) -> ast.Name:
        self.operands.append([ast.unparse(node), iterable])
        return ast.Name(id=f"_v{len(self.operands) - 1}", ctx=ast.Load())

    def visit(self, node, iterable: bool = False):
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            node.elts = [self.visit(e) for e in node.elts]
            return node
        if isinstance(node, ast.Dict) and None not in node.keys:
            node.keys, node.values = [self.visit(k) for k in node.keys], [self.visit(v) for v in node.values]
            return node
        if isinstance(node, ast.Compare):
            node.left, node.comparators = self.visit(node.left), [self.visit(c) for c in node.comparators]
            return node
        if isinstance(node, ast.BoolOp):
            node.values = [self.visit(v) for v in node.values]
            return node
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, _UNARY):
            node.operand = self.visit(node.operand)
            return node
        if isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
            left, right = self.visit(node.left), self.visit(node.right)
            if isinstance(node.op, (ast.Mult, ast.Mod)):
                name = "_mul" if isinstance(node.op, ast.Mult) else "_mod"
                return ast.Call(ast.Name(id=name, ctx=ast.Load()), [left, right], [])
            node.left, node.right = left, right
            return node
        if isinstance(node, ast.Call) and self._host_call(node):
            takes_iterable = isinstance(node.func, ast.Name) and node.func.id in _ITERABLE_FUNCS
            node.args = [self.visit(a, iterable=takes_iterable) for a in node.args]
            for k in node.keywords:
                k.value = self.visit(k.value)
            return node
        return self.operand(node, iterable)

    @staticmethod
    def _host_call(node: ast.Call) -> bool:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return False
        if isinstance(node.func, ast.Name):
            allowed_kw = {"sorted": {"reverse"}, "round": {"ndigits"}}.get(node.func.id, set())
            return node.func.id in _FUNCS and all(k.arg in allowed_kw for k in node.keywords)
        return (isinstance(node.func, ast.Attribute) and node.func.attr == "isclose"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "math"
                and all(k.arg in ("rel_tol", "abs_tol") for k in node.keywords))


def split_asserts(source: str) -> tuple[list, list]:
    """(steps for the harness, checks for ``judge``). Steps run in order in the program's
    namespace: ``["exec", statement]``, or ``["eval", [[operand, iterable], ...]]`` for each
    top-level assert. Raises ``SyntaxError`` for a test that does not parse."""
    steps, checks = [], []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assert):
            split = _Split()
            expr = ast.fix_missing_locations(ast.Expression(split.visit(stmt.test)))
            steps.append(["eval", split.operands])
            checks.append(ast.unparse(expr))
        else:
            steps.append(["exec", ast.unparse(stmt)])
    return steps, checks


def from_plain(value) -> Any:
    """The harness's tagged JSON (``harness._plain``) back to Python values."""
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    if isinstance(value, dict):
        (tag, body), = value.items()
        if tag == "t":
            return tuple(from_plain(v) for v in body)
        if tag in ("s", "f"):
            items = (from_plain(v) for v in body)
            return set(items) if tag == "s" else frozenset(items)
        if tag == "d":
            return {from_plain(k): from_plain(v) for k, v in body}
        if tag == "b":
            return bytes.fromhex(body)
        if tag == "c":
            return complex(*body)
        raise ValueError(f"unknown tag {tag!r}")
    return value


def judge(checks: list[str], values: list) -> bool:
    """Whether every check holds on its operands' plain values (as decoded from JSON)."""
    if not isinstance(values, list) or len(values) != len(checks):
        return False
    for check, operands in zip(checks, values):
        names = {**_NAMES, **{f"_v{i}": from_plain(v) for i, v in enumerate(operands)}, "__builtins__": {}}
        if not eval(compile(check, "check", "eval"), names):  # only nodes _Split kept or built
            return False
    return True


def verdict(checks: list[str], result: str) -> str:
    """An assert-style test's result text: "ok", or why not."""
    try:
        return "ok" if judge(checks, json.loads(result)) else "failed"
    except Exception as e:  # malformed operands (a forged fd 3), a type error in the check
        return f"failed ({type(e).__name__})"
