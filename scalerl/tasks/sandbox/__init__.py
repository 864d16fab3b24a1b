"""Running untrusted generated code (generic infrastructure; code tasks use it).

    from scalerl.tasks.sandbox import Job, Sandbox, SandboxConfig
    results = Sandbox(SandboxConfig(timeout_s=2)).map([Job(code, "stdio", ("1 2\\n",))])

A pure interface: programs and test inputs go in, per-test statuses and outputs come
out; expected outputs never enter the sandbox (the caller compares). Must not know
about tasks, models or training. The threat model and each backend's guarantees are in
docs/sandbox.md.
"""
from scalerl.tasks.sandbox.config import SandboxConfig
from scalerl.tasks.sandbox.runner import Job, RunResult, Sandbox, TestRun, namespaces_available, refusal

__all__ = ["Job", "RunResult", "Sandbox", "SandboxConfig", "TestRun", "namespaces_available", "refusal"]
