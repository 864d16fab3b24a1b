"""Who may connect to a run's transport: the run's secret and address, gloo groups whose ends
prove the secret to each other, sockets bound to the run's address only (each message's
signature is ``wire.Signed``'s), and the files that hand an operator's generator on another node
the secret (``write_secret``) and a SLURM job's generator nodes the address (``job_rendezvous``).

``fleet/pool.py`` (the trainer's end, ``Hub``) and ``fleet/transport.py`` (the generator's end,
``Spoke``) build the trainer <-> generator link on these; transport.py's docstring says why each
is needed (a client that reaches the store's port, or races gloo's unsigned rendezvous keys,
must not be able to order work, announce weights or report rollouts).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
from pathlib import Path
from typing import Mapping, Optional

import torch
import torch.distributed as dist

from scalerl.generation.transfer.wire import TransportError, seconds

HANDSHAKE_TAG = (1 << 30) - 1
"""The gloo tag of the connection handshake (``handshake``): below ``transport.PROBE_TAG``, above any step."""
SECRET_ENV = "SCALERL_TRANSPORT_SECRET"
"""The environment variable that hands a generator process the run's secret (hex)."""
LOOPBACK = "127.0.0.1"


def run_host(explicit: Optional[str] = None) -> str:
    """The address the trainer's store listens on: ``MASTER_ADDR`` when the launcher set it
    (torchrun, and ``train/distributed.py`` for srun: rank 0's node, where the pool lives), else
    ``explicit``, else loopback (a plain local run). A name is resolved once, so the address
    generators are told is the one bound."""
    name = os.environ.get("MASTER_ADDR") or explicit or LOOPBACK
    try:
        return socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as e:
        raise TransportError(f"cannot resolve the trainer's address {name!r} (MASTER_ADDR): {e}") from None


def gloo_group(store, name: str, rank: int, size: int, timeout_s: float, host: str):
    """A gloo group whose sockets listen on ``host`` only (gloo's default device binds every interface)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = seconds(timeout_s)
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    return dist.ProcessGroupGloo(dist.PrefixStore(name, store), rank, size, opts)


def handshake(group, rank: int, size: int, secret: bytes, name: str, timeout_s: float) -> None:
    """Both ends of every connection of ``group`` prove the run's secret to each other: each
    sends a fresh nonce, then the HMAC of the other's nonce (bound to the group and both
    ranks). Pairs go in one global order, so every rank meets its peers without deadlock."""
    def send(t, peer):
        group.send([t], peer, HANDSHAKE_TAG).wait(seconds(timeout_s))

    def recv(peer):
        t = torch.empty(32, dtype=torch.uint8)
        group.recv([t], peer, HANDSHAKE_TAG).wait(seconds(timeout_s))
        return t

    def proof(sender: int, receiver: int, nonce: torch.Tensor) -> torch.Tensor:
        msg = f"{name}/{sender}->{receiver}/".encode() + nonce.numpy().tobytes()
        return torch.frombuffer(bytearray(hmac.new(secret, msg, hashlib.sha256).digest()), dtype=torch.uint8)

    for a in range(size):
        for b in range(a + 1, size):
            if rank not in (a, b):
                continue
            peer, first = (b, True) if rank == a else (a, False)
            mine = torch.frombuffer(bytearray(secrets.token_bytes(32)), dtype=torch.uint8)
            if first:
                send(mine, peer)
                theirs = recv(peer)
            else:
                theirs = recv(peer)
                send(mine, peer)
            if first:
                send(proof(rank, peer, theirs), peer)
                got = recv(peer)
            else:
                got = recv(peer)
                send(proof(rank, peer, theirs), peer)
            if not hmac.compare_digest(got.numpy().tobytes(), proof(peer, rank, mine).numpy().tobytes()):
                raise TransportError(f"{name}: rank {peer} of the group did not prove this run's secret; refused")


def secret_from_env() -> bytes:
    """A generator's copy of the run's secret (removed from the environment its children inherit)."""
    text = os.environ.pop(SECRET_ENV, "")
    if len(text) != 64:
        raise TransportError(f"no run secret in ${SECRET_ENV}: a generator is started by its trainer's pool, "
                             "which passes it, or by an operator from the secret file the trainer names")
    return bytes.fromhex(text)


def listen_socket(host: str) -> socket.socket:
    """A listening socket on ``host`` only, any free port (the store's ``master_listen_fd``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=128)


def hosting_store(host: str, timeout_s: float):
    """A ``TCPStore`` server listening on ``host`` only, on a free port (gloo's default would bind
    every interface)."""
    sock = listen_socket(host)
    store = dist.TCPStore(host, sock.getsockname()[1], None, True, seconds(timeout_s),
                          wait_for_workers=False, master_listen_fd=sock.fileno())
    # The store owns the listening fd now and closes it when it is destroyed. Closing the socket
    # too closed the fd twice: the second close hit whatever file had reused the number since
    # (EBADF in later, unrelated file reads of the same process: tests/test_security_transport.py).
    sock.detach()
    return store


def abort_groups(*groups) -> None:
    """Abort process groups without waiting on their peers; one already broken has nothing left to release."""
    for g in groups:
        if g is not None:
            try:
                g.abort()
            except Exception:  # already broken: nothing left to release
                pass


def local_address(host: str, port: int) -> str:
    """This machine's address on the route to ``host`` (where a generator's gloo sockets listen)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return s.getsockname()[0]


def secret_folder(secret_dir: str | Path | None = None) -> Path:
    return Path(secret_dir or Path.home() / ".scalerl" / "secrets")


def job_rendezvous(secret_dir: str | Path | None = None, env: Mapping[str, str] = os.environ) -> Path | None:
    """Where the trainer of a SLURM job tells the job's generator nodes how to join (its address
    and the secret file's path): keyed by the job and its restart count, so a requeued job's
    generators never read the address of the attempt before. None outside SLURM."""
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    return secret_folder(secret_dir) / f"job-{job}.{env.get('SLURM_RESTART_COUNT', '0')}.json"


def write_secret(secret: bytes, host: str, port: int, folder: Path) -> Path:
    """The run's secret in a file only this user can read (a 0700 folder, a 0600 file), for an
    operator starting generators elsewhere: a log line or argv would be world-readable. In the
    home folder by default, which a cluster's nodes usually share."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / f"generators-{host.replace(':', '_')}-{port}.hex"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex())
    return path
