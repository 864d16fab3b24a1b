"""The sandbox's settings (``task.sandbox.*`` of ``task=code``)."""
from __future__ import annotations

from dataclasses import dataclass

from scalerl.core.errors import check

ISOLATIONS = ("auto", "namespaces", "process")


@dataclass
class SandboxConfig:
    isolation: str = "auto"
    """namespaces: bubblewrap (new pid, network, mount, ipc and uts namespaces; only the system
    libraries and the Python standard library are visible, read-only); process: limits, clean
    environment and temp directory only, with a network namespace where the kernel allows one
    (docs/sandbox.md), refused unless ``unsafe_process_isolation``; auto: namespaces if bubblewrap
    works here, else process (only with ``unsafe_process_isolation``, and a warning)."""
    timeout_s: float = 6.0
    """Wall-clock limit of one test."""
    cpu_s: int = 5
    """CPU-time limit of one test (whole seconds)."""
    total_timeout_s: float = 120.0
    """Wall-clock limit of one completion's whole sandbox run (all its tests)."""
    memory_mb: int = 1024
    """Address-space limit of every process in the sandbox."""
    file_mb: int = 16
    """Largest file a sandboxed process may write."""
    processes: int = 16
    """Processes (and threads) the sandbox may run at once."""
    output_kb: int = 1024
    """Output kept per test; longer output fails the test."""
    open_files: int = 64
    """File descriptors a sandboxed process may hold (RLIMIT_NOFILE)."""
    workers: int = 0
    """Sandboxes run in parallel (0: one per CPU core)."""
    python: str = ""
    """Interpreter inside the sandbox ("" = the one running scalerl, resolved to its real install)."""
    unsafe_process_isolation: bool = False
    """Allow grading without bubblewrap (isolation=process, or auto where bubblewrap does not work).
    The program then sees the host's file system, /dev/shm and SysV IPC (a channel between runs),
    and as a non-root user can signal the grader; docs/sandbox.md lists what still holds."""

    def __post_init__(self) -> None:
        check(self.isolation in ISOLATIONS, "task.sandbox.isolation", f"must be one of {ISOLATIONS}, got {self.isolation!r}")
        for key in ("timeout_s", "total_timeout_s", "cpu_s", "memory_mb", "file_mb", "processes", "output_kb",
                    "open_files"):
            check(getattr(self, key) > 0, f"task.sandbox.{key}", f"must be > 0, got {getattr(self, key)}")
        check(self.processes >= 2, "task.sandbox.processes", f"must be >= 2 (the harness and one test), got {self.processes}")
        check(self.workers >= 0, "task.sandbox.workers", f"must be >= 0, got {self.workers}")
