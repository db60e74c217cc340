"""Read an offline W&B run file (`run-*.wandb`) back, with wandb's own protobuf schema.

The file is a LevelDB-style log: a 7-byte header (":W&B", magic 0xBEE1, version), then 32 KiB blocks
of chunks, each with a 7-byte header (crc32, little-endian length, type: 1 full, 2 first, 3 middle,
4 last). Each reassembled record is a `wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind in (FULL, FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def read_run(path: Path) -> dict:
    """group, job_type, config and summary of one offline run file."""
    out = {"config": {}, "summary": {}, "group": None, "job_type": None, "history_keys": set()}
    for r in records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["group"], out["job_type"] = r.run.run_group, r.run.job_type
            for item in r.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in r.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif kind == "summary":
            for item in r.summary.update:
                out["summary"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            out["history_keys"].update(item.key or "/".join(item.nested_key) for item in r.history.item)
    return out
