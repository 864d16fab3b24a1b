"""What crosses the transport, message by message: JSON plus raw tensor bytes, never pickle
(docs/async.md), signed store values, and the broadcast that carries a push's buckets.

``encode`` writes plain data, CPU tensors, enums, dataclass instances and ``functools.partial``
of module-level functions; ``decode`` rebuilds only the dataclasses, enums and functions its
caller names and refuses everything else, so a message cannot run code in the process that
reads it. ``Signed`` signs every store value under the run's secret (a client that reaches the
store's port cannot forge an order or an announcement). ``fleet/transport.py`` carries these
bytes; who may connect at all is ``trust.py``'s.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import hashlib
import hmac
import json
import struct
from typing import Callable, Sequence

import torch
import torch.distributed as dist


class TransportError(RuntimeError):
    """A wait on the other side failed (timeout, dead process, reported error); the message names the stage."""


def encode(obj) -> bytes:
    """``obj`` as 8-byte header length, JSON header, raw tensor bytes. Handles None, bools,
    numbers, strings, lists, tuples, dicts, tensors (CPU), enums, dataclass instances and
    ``functools.partial`` of module-level functions; ``decode`` rebuilds only the classes
    and functions its caller allows."""
    blobs: list[bytes] = []

    def enc(v):
        if v is None or type(v) in (bool, int, float, str):
            return v
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            blobs.append(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            return {"__tensor": [len(blobs) - 1, str(t.dtype).removeprefix("torch."), list(t.shape)]}
        if isinstance(v, enum.Enum):
            return {"__enum": [type(v).__name__, enc(v.value)]}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {"__dc": [type(v).__name__, {f.name: enc(getattr(v, f.name)) for f in dataclasses.fields(v)}]}
        if isinstance(v, functools.partial):
            return {"__fn": [_fn_name(v.func), [enc(a) for a in v.args], {k: enc(x) for k, x in v.keywords.items()}]}
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v] if isinstance(v, list) else {"__tuple": [enc(x) for x in v]}
        if isinstance(v, dict):
            return {"__dict": [[enc(k), enc(x)] for k, x in v.items()]}
        for atom in (bool, int, float, str):  # subclasses (numpy scalars) as the plain value
            if isinstance(v, atom):
                return atom(v)
        raise TypeError(f"the transport carries plain data, tensors and dataclasses, not a {type(v).__name__}")

    header = json.dumps([enc(obj), [len(b) for b in blobs]]).encode()
    return b"".join([struct.pack("<Q", len(header)), header, *blobs])


def decode(data: bytes, types: Sequence[type] = (), functions: Sequence[Callable] = ()):
    """``encode``'s bytes back to objects, building only the dataclasses and enums in ``types``
    and the functions in ``functions``; anything else is refused (``TransportError``)."""
    classes = {c.__name__: c for c in types}
    fns = {_fn_name(f): f for f in functions}
    try:
        (n,) = struct.unpack_from("<Q", data)
        tree, sizes = json.loads(bytes(data[8:8 + n]))
        offsets, at = [], 8 + n
        for size in sizes:
            offsets.append(at)
            at += size
        if at != len(data):
            raise ValueError(f"{len(data)} bytes, the header describes {at}")
    except (struct.error, ValueError, TypeError) as e:
        raise TransportError(f"refused a malformed message ({e})") from None

    def dec(v):
        if not isinstance(v, (list, dict)):
            return v
        if isinstance(v, list):
            return [dec(x) for x in v]
        (tag, body), = v.items()
        if tag == "__tensor":
            i, dtype, shape = body
            dt = getattr(torch, dtype, None)
            if not isinstance(dt, torch.dtype):
                raise TransportError(f"refused a tensor of dtype {dtype!r}")
            if not sizes[i]:
                return torch.empty(shape, dtype=dt)
            raw = torch.frombuffer(bytearray(data[offsets[i]:offsets[i] + sizes[i]]), dtype=torch.uint8)
            return raw.view(dt).reshape(shape)
        if tag == "__tuple":
            return tuple(dec(x) for x in body)
        if tag == "__dict":
            return {dec(k): dec(x) for k, x in body}
        if tag in ("__dc", "__enum"):
            name, fields = body
            cls = classes.get(name)
            if cls is None:
                raise TransportError(f"refused a {name}: not a type this message may carry")
            if tag == "__enum":
                return cls(dec(fields))
            obj = cls.__new__(cls)  # no __init__/__post_init__: nothing of the sender's runs here
            for k, x in fields.items():
                if k not in {f.name for f in dataclasses.fields(cls)}:
                    raise TransportError(f"refused a {name} with an unknown field {k!r}")
                object.__setattr__(obj, k, dec(x))
            return obj
        if tag == "__fn":
            name, args, kw = body
            if name not in fns:
                raise TransportError(f"refused the function {name}: not one this message may name")
            return functools.partial(fns[name], *map(dec, args), **{k: dec(x) for k, x in kw.items()})
        raise TransportError(f"refused a message with the tag {tag!r}")

    return dec(tree)


def _fn_name(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def to_bytes_tensor(obj) -> torch.Tensor:
    return torch.frombuffer(bytearray(encode(obj)), dtype=torch.uint8)


def digest(bufs: Sequence[torch.Tensor]) -> str:
    """BLAKE2b of tensors' bytes (the check on what the gloo groups carried)."""
    h = hashlib.blake2b(digest_size=16)
    for b in bufs:
        h.update(b.detach().contiguous().view(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=s)


def broadcast(group, bufs, timeout_s: float) -> list:
    """Start a broadcast from rank 0 of each of ``bufs`` over ``group``; returns the pending works."""
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.timeout = 0, seconds(timeout_s)
    return [group.broadcast([b], opts) for b in bufs]


class Signed:
    """The store with every value signed (HMAC-SHA256 under the run's secret, bound to its key)."""

    def __init__(self, store, secret: bytes):
        self.raw, self._secret = store, secret

    def _mac(self, key: str, value: bytes) -> bytes:
        return hmac.new(self._secret, key.encode() + b"\0" + value, hashlib.sha256).digest()

    def set(self, key: str, value: bytes) -> None:
        self.raw.set(key, self._mac(key, value) + value)

    def get(self, key: str) -> bytes:
        data = self.raw.get(key)
        mac, value = data[:32], data[32:]
        if not hmac.compare_digest(mac, self._mac(key, value)):
            raise TransportError(f"refused {key!r}: not signed with this run's secret (a client without it "
                                 "wrote to the store's port)")
        return value

    def check(self, keys: Sequence[str]) -> bool:
        return self.raw.check(list(keys))

    def delete_key(self, key: str) -> bool:
        return self.raw.delete_key(key)
