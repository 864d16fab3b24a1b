"""Benchmark the code sandbox: code rewards graded per second, isolation on.

    python benchmarks/bench_sandbox.py                 # 2 workers (2 cores), 96 completions
    python benchmarks/bench_sandbox.py --workers 4 --completions 256

Workload: DeepCoder-style stdin/stdout problems with 4 tests each; the completions are
half correct, a quarter wrong output, a quarter raising an exception (no timeouts: a
timeout costs its limit, whatever the sandbox). Each completion is graded exactly as a
run grades it: `task=code`'s score function, one sandbox per completion, all its tests
inside it.

Arms, A-B-A so load drift shows: namespaces (bubblewrap), process (the fallback), and the
baseline: no isolation at all, one bare `python -c` per test (what a naive grader does),
with the same number of parallel workers. Nothing here is a test.

    python benchmarks/bench_sandbox.py --against /tmp/head   # this checkout's sandbox against another's

``--against DIR`` (a checkout, e.g. ``git archive HEAD | tar -x -C DIR``) compares the two
sandboxes' namespaces backends alone, interleaved A-B six times in one process, so both see
the same load; each grades the same jobs through its own ``Sandbox.map`` and this
checkout's ``passed``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout

from scalerl.tasks.code import CodeConfig, build_code, outputs_match  # noqa: E402
from scalerl.tasks.sandbox import SandboxConfig, namespaces_available  # noqa: E402

TESTS = [{"input": f"{a} {b}\n", "output": f"{a + b}\n", "testtype": "stdin"} for a, b in ((1, 2), (5, 7), (-3, 3), (10, 20))]
PROGRAMS = ["a, b = map(int, input().split())\nprint(a + b)\n"] * 2 + [
    "a, b = map(int, input().split())\nprint(a - b)\n", "raise ValueError('boom')\n"]


def completions(n):
    return [f"<think>ok</think>\n```python\n{PROGRAMS[i % len(PROGRAMS)]}```" for i in range(n)]


def sandboxed(data_path, isolation, workers, python):
    cfg = CodeConfig(name="code", path=str(data_path), n_heldout=1,
                     sandbox=SandboxConfig(isolation=isolation, workers=workers, python=python,
                                           unsafe_process_isolation=isolation == "process"))
    task = build_code(cfg)
    problem = task.train[0]
    return lambda texts: task.score(texts, [problem] * len(texts)).correct


def bare(workers, python):
    def grade_one(text):
        code = text.split("```python\n", 1)[1].rsplit("```", 1)[0]
        ok = []
        for t in TESTS:
            p = subprocess.run([python, "-c", code], input=t["input"], capture_output=True, text=True, timeout=10)
            ok.append(p.returncode == 0 and outputs_match(p.stdout, t["output"]))
        return all(ok)

    def grade(texts):
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(grade_one, texts))
    return grade


def against(other: Path, workers: int, completions: int, rounds: int = 6) -> None:
    """This checkout's namespaces sandbox against ``other``'s, interleaved in one process."""
    import importlib.util

    from scalerl.tasks.code import parse_tests, passed
    from scalerl.tasks.sandbox import Job, Sandbox

    spec = importlib.util.spec_from_file_location("other_runner", other / "scalerl/tasks/sandbox/runner.py")
    theirs = importlib.util.module_from_spec(spec)
    sys.modules["other_runner"] = theirs  # dataclasses look their module up
    spec.loader.exec_module(theirs)  # its own harness.py; this checkout's SandboxConfig (a superset)
    tests = parse_tests(json.dumps(TESTS))
    jobs = [Job(PROGRAMS[i % len(PROGRAMS)], tests.style, tests.inputs) for i in range(completions)]
    expected = [i % len(PROGRAMS) < 2 for i in range(completions)]
    cfg = SandboxConfig(isolation="namespaces", workers=workers)
    arms = {f"namespaces ({other})": theirs.Sandbox(cfg), "namespaces (this checkout)": Sandbox(cfg)}
    times = {k: [] for k in arms}
    for _ in range(rounds):
        for name, sb in arms.items():
            t0 = time.perf_counter()
            got = [all(passed(tests, r.tests)) for r in sb.map(jobs)]
            times[name].append(time.perf_counter() - t0)
            assert got == expected, f"{name} graded wrongly"
    print(f"{platform.node()}: {os.cpu_count()} cores, {workers} workers, {completions} completions x "
          f"{len(TESTS)} tests, {rounds} interleaved rounds")
    rates = {k: completions / (sum(ts) / len(ts)) for k, ts in times.items()}
    for name, ts in times.items():
        print(f"{name:40s} {rates[name]:7.1f} rewards/s  (runs {', '.join(f'{t:.2f}s' for t in ts)})")
    a, b = rates.values()
    print(f"this checkout / other: {b / a:.2f}x")


def timed(fn, texts):
    t0 = time.perf_counter()
    out = fn(texts)
    return time.perf_counter() - t0, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--completions", type=int, default=96)
    ap.add_argument("--python", default="", help="interpreter in the sandbox (process isolation as root needs a "
                                                 "world-readable one, e.g. /usr/bin/python3)")
    ap.add_argument("--against", type=Path, default=None, help="another checkout: compare its namespaces "
                                                               "sandbox with this one's, interleaved")
    args = ap.parse_args(argv)
    if args.against is not None:
        return against(args.against, args.workers, args.completions)
    texts = completions(args.completions)
    expected = [i % len(PROGRAMS) < 2 for i in range(args.completions)]
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "deepcoder.jsonl"
        data.write_text("".join(json.dumps({"problem": f"Sum {i}", "tests": json.dumps(TESTS)}) + "\n" for i in range(4)))
        proc_python = args.python or ("/usr/bin/python3" if os.geteuid() == 0 else "")
        arms = {"namespaces": sandboxed(data, "namespaces", args.workers, args.python) if not namespaces_available(
                    SandboxConfig(python=args.python)) else None,
                "process": sandboxed(data, "process", args.workers, proc_python),
                "bare subprocess (baseline)": bare(args.workers, proc_python or sys.executable)}
        order = ["bare subprocess (baseline)", "namespaces", "process", "namespaces", "bare subprocess (baseline)"]
        times = {k: [] for k in arms}
        for name in order:
            if arms[name] is None:
                continue
            seconds, got = timed(arms[name], texts)
            assert got == expected, f"{name} graded wrongly"
            times[name].append(seconds)
    print(f"{platform.node()}: {os.cpu_count()} cores, {args.workers} workers, {args.completions} completions x "
          f"{len(TESTS)} tests")
    base = sum(times["bare subprocess (baseline)"]) / len(times["bare subprocess (baseline)"])
    for name, ts in times.items():
        if not ts:
            print(f"{name:28s} unavailable: {namespaces_available(SandboxConfig(python=args.python))}")
            continue
        mean = sum(ts) / len(ts)
        print(f"{name:28s} {args.completions / mean:7.1f} rewards/s  ({mean * 1000 / args.completions:6.1f} ms each; "
              f"{base / mean:4.2f}x the baseline's rate; runs {', '.join(f'{t:.2f}s' for t in ts)})")


if __name__ == "__main__":
    main()
