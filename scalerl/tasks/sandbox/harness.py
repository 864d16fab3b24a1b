"""The program that runs inside the sandbox (standard library only, no scalerl import).

The host starts it as ``python -I -S -c <this file's source>`` and writes one JSON job to
its stdin. It then, before any untrusted code runs:
  1. (process isolation only) tries to enter a new network namespace, and drops to the
     job's throwaway uid when the host is root;
  2. sets hard resource limits on itself, inherited by everything it starts: address
     space, file size, processes, no core files;
and for each test forks a child that sets a CPU-time limit, points stdin at the test's
input, stdout at a pipe and fd 3 at a result pipe, closes every other descriptor, and
executes the solution. The harness waits for the child with a wall-clock limit, kills
its process group, and (when the sandbox owns its uid or pid namespace) every other
process it can signal, so nothing a test starts outlives it. It prints one JSON line:
each test's status and output. It never sees expected outputs: the host compares.
"""
import json
import os
import resource
import select
import signal
import sys
import time

RESULT_FD = 3


def _limits(job):
    mb = 1 << 20
    for name, value in (("RLIMIT_AS", job["memory_mb"] * mb), ("RLIMIT_FSIZE", job["file_mb"] * mb),
                        ("RLIMIT_NPROC", job["processes"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))


def _isolate_network():
    """Process isolation only: a new network namespace where the kernel allows it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    if libc.unshare(clone_newnet) == 0:
        return True
    return libc.unshare(clone_newnet | clone_newuser) == 0


def _block_network_hook(event, args):
    """Fallback when no network namespace could be made: refuse Internet sockets and
    ctypes (which could call the socket syscalls directly). An audit hook cannot be
    removed from Python code."""
    if event == "socket.__new__" and len(args) > 1 and args[1] not in (1,):  # AF_UNIX = 1
        raise PermissionError("network access is disabled in this sandbox")
    if event in ("socket.connect", "socket.bind", "socket.sendto") or event.startswith("ctypes."):
        raise PermissionError(f"{event} is disabled in this sandbox")


def _run_child(job, test):
    """In the forked child: run the solution on one test, report on fd 3."""
    import builtins
    import io

    cpu = job["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if job.get("audit_block_network"):
        sys.addaudithook(_block_network_hook)
    out = os.fdopen(RESULT_FD, "w")
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    style, code = job["style"], job["code"]
    status = 0
    try:
        ns = {"__name__": "__main__" if style == "stdio" else "solution", "__builtins__": builtins}
        exec(compile(code, "solution.py", "exec"), ns)
        if style == "call":
            fn = job["fn_name"]
            cls = ns.get("Solution")
            target = getattr(cls(), fn) if cls is not None and hasattr(cls, fn) else ns[fn]
            result = target(*json.loads(test))
            out.write(json.dumps(result, default=repr))
        elif style == "assert":
            exec(compile(test, "test.py", "exec"), ns)
            out.write("ok")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        out.flush()
    except BaseException:
        status = status or 1
    os._exit(status)


def _wait(pid, pipes, timeout, limit):
    """Collect the pipes' bytes until the child exits or ``timeout`` passes."""
    chunks = {fd: bytearray() for fd in pipes}
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline, exited = time.monotonic() + timeout, None
    open_fds = set(pipes)
    while exited is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return chunks, None
        watch = list(open_fds) + ([pidfd] if pidfd is not None else [])
        ready, _, _ = select.select(watch, [], [], min(left, 0.05 if pidfd is None else left))
        for fd in ready:
            if fd == pidfd:
                continue
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
            elif len(chunks[fd]) < limit:
                chunks[fd] += data[: limit - len(chunks[fd]) + 1]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited = status
    for fd in list(open_fds):  # drain what the child wrote before exiting
        while True:
            r, _, _ = select.select([fd], [], [], 0)
            data = os.read(fd, 65536) if r else b""
            if not data:
                break
            if len(chunks[fd]) < limit:
                chunks[fd] += data[: limit - len(chunks[fd]) + 1]
    if pidfd is not None:
        os.close(pidfd)
    return chunks, exited


def _one_test(job, index, test):
    inp = f"in_{index}"
    with open(inp, "w") as f:
        f.write(test if job["style"] == "stdio" else "")
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            fd = os.open(inp, os.O_RDONLY)
            os.dup2(fd, 0)
            os.dup2(out_w, 1)
            os.dup2(res_w, RESULT_FD)
            null = os.open(os.devnull, os.O_WRONLY) if os.path.exists(os.devnull) else out_w
            os.dup2(null, 2)
            os.closerange(RESULT_FD + 1, 1 << 16)
            _run_child(job, test)
        finally:
            os._exit(120)
    os.close(out_w)
    os.close(res_w)
    limit = job["output_kb"] * 1024
    chunks, status = _wait(pid, [out_r, res_r], job["timeout_s"], limit)
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    if status is None:
        os.waitpid(pid, 0)
    os.close(out_r)
    os.close(res_r)
    if job.get("reap_all"):  # the sandbox owns this uid or pid namespace: nothing else of ours may live
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    os.unlink(inp)
    stdout, result = bytes(chunks[out_r]), bytes(chunks[res_r])
    if status is None:
        state = "timeout"
    elif os.WIFSIGNALED(status):
        state = "timeout" if os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL) else "error"
    else:
        state = "ok" if os.WEXITSTATUS(status) == 0 else "error"
    too_long = len(stdout) > limit or len(result) > limit
    return {"status": "error" if too_long and state == "ok" else state,
            "stdout": stdout[:limit].decode("utf-8", "replace"), "result": result[:limit].decode("utf-8", "replace"),
            "seconds": round(time.monotonic() - t0, 4)}


def main():
    job = json.loads(sys.stdin.buffer.read())
    os.close(0)
    setup = {"network": "namespace" if job.get("network_isolated") else "none"}
    if job.get("isolate_network"):
        made = not job.get("force_audit_hook") and _isolate_network()  # forcing: tests of the fallback itself
        setup["network"] = "namespace" if made else "audit_hook"
        job["audit_block_network"] = not made
    if job.get("uid") is not None:
        os.setgroups([])
        os.setgid(job["uid"])
        os.setuid(job["uid"])
    _limits(job)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    results = [_one_test(job, i, t) for i, t in enumerate(job["tests"])]
    sys.stdout.write(json.dumps({"setup": setup, "tests": results}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
