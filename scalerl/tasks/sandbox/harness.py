"""The program that runs inside the sandbox (standard library only, no scalerl import).

The host starts it as ``python -I -S -c <this file's source>`` and writes one JSON job to
its stdin. It then, before any untrusted code runs:
  1. (process isolation only) tries to enter a new network namespace, and drops to the
     job's throwaway uid when the host is root;
  2. sets hard resource limits on itself, inherited by everything it starts: address
     space, file size, processes, no core files;
     As root it empties its capability bounding set and sets no_new_privs first, so no
     process of the run can regain a privilege;
  3. makes itself non-dumpable, so a program of the same uid cannot trace it or open its
     ``/proc/<pid>/mem`` or descriptors; under bubblewrap it is also pid 1 of the run's pid
     namespace, which no process inside may signal (no SIGSTOP that defeats the timeout);
and for each test forks a child that sets a CPU-time limit, points stdin at the test's
input, stdout at a pipe and fd 3 at a result pipe, closes every other descriptor, and
executes the solution. The harness waits for the child with a wall-clock limit, kills
its process group, and (when the sandbox owns its uid or pid namespace) every other
process it can signal, so nothing a test starts outlives it. It prints one JSON line:
each test's status and output. It never sees expected outputs: the host compares.

What the child writes on fd 3 is data, never a verdict: a function's return value, or an
assert-style test's operands, as plain values (``_plain``: exact built-in types only, so
an object whose ``__eq__`` always says yes cannot leave the process). The program can
write to fd 3 too; that is no more than returning a value, which the host still compares.
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
                        ("RLIMIT_NPROC", job["processes"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NOFILE", job["open_files"])):
        resource.setrlimit(getattr(resource, name), (value, value))


def _prctl(*args):
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(*args)


def _drop_privileges(uid):
    """As root: empty the capability bounding set, set no_new_privs, become ``uid`` (which
    clears the permitted, effective and ambient sets) and clear the inheritable set."""
    import ctypes

    pr_capbset_drop, pr_set_no_new_privs = 24, 38
    for cap in range(64):
        if _prctl(pr_capbset_drop, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last cap
            break
    _prctl(pr_set_no_new_privs, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    capset = ctypes.CDLL(None, use_errno=True).capset
    capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())  # version 3: every set empty


_ATOMS = (type(None), bool, int, float, str)


def _plain(value, depth=0, iterable=False):
    """``value`` as JSON-able data, refusing every type but the exact built-in ones: a subclass
    (of int, say) could carry its own ``__eq__``. Tagged: a tuple is {"t": [...]}, a set
    {"s": [...]}, a frozenset {"f": [...]}, a dict {"d": [[k, v], ...]}, bytes {"b": hex},
    a complex {"c": [re, im]}; a list is a list. ``iterable``: any other iterable (a
    generator, a map) becomes the list of its items, each checked."""
    if depth > 100:
        raise ValueError("a value nested more than 100 deep")
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [_plain(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {{tuple: "t", set: "s", frozenset: "f"}[kind]: [_plain(v, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[_plain(k, depth + 1), _plain(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if iterable and hasattr(kind, "__iter__"):
        return [_plain(v, depth + 1) for v in iter(value)]
    raise TypeError(f"a {kind.__name__} is not plain data (numbers, strings, lists, tuples, dicts, sets, bytes)")


def _returned(value, depth=0):
    """A function-call test's return value, checked like ``_plain``, as the JSON the host compares."""
    if depth > 100:
        raise ValueError("a value nested more than 100 deep")
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind in (list, tuple):
        return [_returned(v, depth + 1) for v in value]
    if kind is dict and all(type(k) in _ATOMS for k in value):
        return {k: _returned(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"returned a {kind.__name__}, not plain data (numbers, strings, lists, tuples, str-keyed dicts)")


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
            out.write(json.dumps(_returned(target(*json.loads(test)))))
        elif style == "assert":  # the test's statements, its asserts' operands sent to the host (runner.py)
            values = []
            for kind, body in test:
                if kind == "exec":
                    exec(compile(body, "test.py", "exec"), ns)
                else:
                    values.append([_plain(eval(compile(src, "test.py", "eval"), ns), iterable=it) for src, it in body])
            out.write(json.dumps(values))
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
    total = {fd: 0 for fd in pipes}  # every byte read, kept or not: output longer than the limit fails
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline, exited = time.monotonic() + timeout, None
    open_fds = set(pipes)
    while exited is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return chunks, total, None
        watch = list(open_fds) + ([pidfd] if pidfd is not None else [])
        ready, _, _ = select.select(watch, [], [], min(left, 0.05 if pidfd is None else left))
        for fd in ready:
            if fd == pidfd:
                continue
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
            total[fd] += len(data)
            if len(chunks[fd]) < limit:
                chunks[fd] += data[: limit - len(chunks[fd])]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited = status
    for fd in list(open_fds):  # drain what the child wrote before exiting
        while True:
            r, _, _ = select.select([fd], [], [], 0)
            data = os.read(fd, 65536) if r else b""
            if not data:
                break
            total[fd] += len(data)
            if len(chunks[fd]) < limit:
                chunks[fd] += data[: limit - len(chunks[fd])]
    if pidfd is not None:
        os.close(pidfd)
    return chunks, total, exited


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
    chunks, total, status = _wait(pid, [out_r, res_r], job["timeout_s"], limit)
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
        while True:  # as pid 1 the harness inherits every orphan: reap them, or they hold process slots
            try:
                if os.waitpid(-1, 0)[0] == 0:
                    break
            except ChildProcessError:
                break
    os.unlink(inp)
    stdout, result = bytes(chunks[out_r]), bytes(chunks[res_r])
    if status is None:
        state = "timeout"
    elif os.WIFSIGNALED(status):
        state = "timeout" if os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL) else "error"
    else:
        state = "ok" if os.WEXITSTATUS(status) == 0 else "error"
    too_long = total[out_r] > limit or total[res_r] > limit
    return {"status": "error" if too_long and state == "ok" else state,
            "stdout": stdout.decode("utf-8", "replace"), "result": result.decode("utf-8", "replace"),
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
        _drop_privileges(job["uid"])
    _prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: a program of the same uid cannot trace this process
    _limits(job)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    results = [_one_test(job, i, t) for i, t in enumerate(job["tests"])]
    sys.stdout.write(json.dumps({"setup": setup, "tests": results}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
