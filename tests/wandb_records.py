"""Read the records of an offline W&B run (``run-<id>.wandb``) back, for tests.

wandb 0.31 ships the record protobufs (``wandb.proto.wandb_internal_pb2.Record``) but no
reader for the file that holds them: a LevelDB-style log, a 7-byte header (``:W&B``, a
2-byte magic, a version byte), then 32 KiB blocks of chunks, each with a 7-byte header
(crc32, length, type: 1 full, 2 first, 3 middle, 4 last).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7


def _payloads(data: bytes):
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:                    # block trailer: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:        # zero padding to the end of the block
            pos += left
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk


def records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B record log"
    out = []
    for raw in _payloads(data):
        record = pb.Record()
        record.ParseFromString(raw)
        out.append(record)
    return out


def summary(path: Path) -> dict:
    """What a test asks of a run: its run record (config, tags, group), metric definitions and history keys."""
    recs = records(path)
    run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
    metrics = [r.metric for r in recs if r.WhichOneof("record_type") == "metric"]
    history = [{"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
               for r in recs if r.WhichOneof("record_type") == "history"]
    return {
        "project": run.project, "group": run.run_group, "name": run.display_name, "id": run.run_id,
        "tags": list(run.tags), "job_type": run.job_type,
        "config": {u.key: json.loads(u.value_json) for u in run.config.update},
        "step_metric": {(m.name or m.glob_name): m.step_metric for m in metrics},
        "history": history,
    }
