"""The code reward cannot be forged (issue 27 points 4-10): for each test style, with and
without bubblewrap, a program that solves nothing gets no pass, whatever it does to the
result channel or to equality; and the sandbox holds its limits against the program.

Every forgery is graded the way a run grades it (``code.passed``)."""
from __future__ import annotations

import os
import sysconfig
import time

import pytest
from helpers import skip_without_apt_package

from scalerl.tasks.code import CodeTests, passed
from scalerl.tasks.sandbox import Job, Sandbox, SandboxConfig, namespaces_available

LIMITS = dict(timeout_s=3.0, cpu_s=2, total_timeout_s=40.0, memory_mb=512, processes=16)
PYTHON = "" if os.geteuid() else "/usr/bin/python3"  # root's process fallback needs a world-readable one


def namespaces(**kw) -> Sandbox:
    cfg = SandboxConfig(isolation="namespaces", **{**LIMITS, **kw})
    why = namespaces_available(cfg)
    if why:
        skip_without_apt_package(f"namespaces backend unavailable: {why}")
    return Sandbox(cfg)


def process(**kw) -> Sandbox:
    if os.geteuid() == 0 and not os.path.exists("/usr/bin/python3"):
        pytest.skip("no world-readable interpreter for the root process fallback")
    return Sandbox(SandboxConfig(isolation="process", python=PYTHON, unsafe_process_isolation=True, **{**LIMITS, **kw}))


BACKENDS = [pytest.param(namespaces, marks=pytest.mark.system), process]  # bubblewrap is an apt package
FD3 = "import os\nos.write(3, b'ok')\nos.write(3, b'[[4]]')\nos._exit(0)\n"  # the forged pass of issue 27.4
ALWAYS_EQUAL = ("class Yes(int):\n"
                "    def __eq__(self, other): return True\n"
                "    def __ne__(self, other): return False\n"
                "    def __bool__(self): return True\n"
                "    __hash__ = int.__hash__\n"
                "class Any:\n"
                "    def __eq__(self, other): return True\n"
                "    def __lt__(self, other): return True\n"
                "    def __sub__(self, other): return self\n"
                "    def __abs__(self): return 0\n"
                "    def __bool__(self): return False\n")


def grade(sb: Sandbox, tests: CodeTests, code: str) -> list[bool]:
    res = sb.run(Job(code, tests.style, tests.inputs, tests.fn_name))
    return passed(tests, res.tests)


@pytest.mark.parametrize("make", BACKENDS)
def test_no_forged_pass_on_stdio_tests(make):
    sb = make()
    tests = CodeTests("stdio", ("2 3\n",), ("5\n",))
    assert grade(sb, tests, FD3) == [False]
    assert grade(sb, tests, "import os\nos.write(3, b'5\\n')\n") == [False]
    assert grade(sb, tests, "a, b = map(int, input().split())\nprint(a + b)\n") == [True]  # still grades


@pytest.mark.parametrize("make", BACKENDS)
def test_no_forged_pass_on_function_call_tests(make):
    sb = make()
    tests = CodeTests("call", ("[2, 3]",), ("5",), "add")
    assert grade(sb, tests, FD3 + "def add(a, b): return 0\n") == [False]
    assert grade(sb, tests, ALWAYS_EQUAL + "def add(a, b): return Yes(0)\n") == [False]  # not plain data
    assert grade(sb, tests, ALWAYS_EQUAL + "def add(a, b): return Any()\n") == [False]
    assert grade(sb, tests, "def add(a, b): return a + b\n") == [True]


@pytest.mark.parametrize("make", BACKENDS)
def test_no_forged_pass_on_assert_tests(make):
    sb = make()
    checks = ("assert f(2) == 4", "assert f(2) == 4 and f(3) == 6", "assert not f(9) < 3",
              "assert abs(f(1) - 2.0) < 1e-9", "assert sorted(f(0)) == [1, 2]", "x = 2\nassert f(x) == 4, 'message'")
    tests = CodeTests("assert", checks, ("",) * len(checks))
    assert grade(sb, tests, FD3 + "def f(x): return 0\n") == [False] * len(checks)
    assert grade(sb, tests, ALWAYS_EQUAL + "def f(x): return Yes(0)\n") == [False] * len(checks)
    assert grade(sb, tests, ALWAYS_EQUAL + "def f(x): return Any()\n") == [False] * len(checks)
    # the checks' operands are evaluated in the sandbox; the comparisons on the host
    honest = ("def f(x):\n"
              "    if x == 0:\n"
              "        return (v for v in (2, 1))\n"  # any iterable may feed sorted()
              "    return 2 * x if x != 9 else 5\n")
    assert grade(sb, tests, honest) == [True, True, True, True, True, True]


@pytest.mark.parametrize("make", BACKENDS)
def test_output_one_byte_over_the_limit_fails_even_on_64k_reads(make):
    sb = make(output_kb=64)
    exact = sb.run(Job("import sys\nsys.stdout.write('x' * 65536)\n", "stdio", ("",)))
    assert exact.tests[0].status == "ok" and len(exact.tests[0].stdout) == 65536
    for n in (65537, 131072, 4 * 65536):
        over = sb.run(Job(f"import os\nfor _ in range({n // 65536}):\n    os.write(1, b'x' * 65536)\n"
                          f"os.write(1, b'x' * {n % 65536})\n", "stdio", ("",)))
        assert over.tests[0].status == "error", n


@pytest.mark.system
def test_the_program_cannot_stop_the_harness():
    """SIGSTOP to its parent (the harness, pid 1 of the sandbox) and to every pid it can see:
    the per-test timeout still holds, well before the run's total limit."""
    sb = namespaces()
    code = ("import os, signal\n"
            "for pid in {os.getppid(), 1, *[int(p) for p in os.listdir('/proc') if p.isdigit()]} - {os.getpid()}:\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGSTOP)\n"
            "    except OSError:\n"
            "        pass\n"
            "while True:\n"
            "    pass\n")
    t0 = time.monotonic()
    res = sb.run(Job(code, "stdio", ("", "")))
    took = time.monotonic() - t0
    assert res.status == "ok" and [t.status for t in res.tests] == ["timeout", "timeout"], res
    assert took < LIMITS["total_timeout_s"] / 2, took


@pytest.mark.system
def test_the_program_cannot_trace_or_read_the_harness():
    """The harness is non-dumpable: its descriptors (the report pipe to the host), memory and
    environment are closed to a program of the same uid."""
    code = ("import os\n"
            "for what in ('fd', 'mem', 'environ'):\n"
            "    try:\n"
            "        p = f'/proc/{os.getppid()}/{what}'\n"
            "        os.listdir(p) if what == 'fd' else open(p, 'rb').read(1)\n"
            "        print(what, 'open')\n"
            "    except OSError as e:\n"
            "        print(what, type(e).__name__)\n")
    res = namespaces().run(Job(code, "stdio", ("",)))
    assert res.tests[0].stdout.splitlines() == ["fd PermissionError", "mem PermissionError", "environ PermissionError"]


@pytest.mark.system
def test_no_capabilities_few_files_and_no_site_packages_inside():
    sb = namespaces()
    site = sysconfig.get_paths()["purelib"]
    code = ("import os, resource\n"
            "caps = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if l.startswith('Cap'))\n"
            "print(sorted({v.strip() for v in caps.values()}))\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE))\n"
            f"print(os.path.isdir({site!r}) and os.listdir({site!r}))\n"
            "try:\n"
            "    import torch\n"
            "    print('torch')\n"
            "except ImportError:\n"
            "    print('no torch')\n")
    res = sb.run(Job(code, "stdio", ("",)))
    assert res.tests[0].stdout.splitlines() == ["['0000000000000000']", "(64, 64)", "[]", "no torch"], res


def test_process_isolation_is_refused_unless_the_risk_is_accepted(monkeypatch):
    from scalerl.tasks.sandbox import runner

    with pytest.raises(RuntimeError, match="unsafe_process_isolation=true"):
        Sandbox(SandboxConfig(isolation="process", python=PYTHON))
    monkeypatch.setattr(runner, "_PROBES", {})
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)  # no bubblewrap: auto does not fall back
    with pytest.raises(RuntimeError, match="bubblewrap is unavailable.*unsafe_process_isolation=true"):
        Sandbox(SandboxConfig(isolation="auto", python=PYTHON))
    with pytest.warns(RuntimeWarning, match="falling back to process isolation"):
        assert Sandbox(SandboxConfig(isolation="auto", python=PYTHON, unsafe_process_isolation=True)).isolation == "process"
