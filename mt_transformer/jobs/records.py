"""The files of a corpus job: its progress record, its output as UTF-8 or gzip members, and the
merge of a sharded job's outputs back into input order."""

from __future__ import annotations

import contextlib
import gzip
import json
import os

from mt_transformer.data.text import open_binary
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path

RECORD_FORMAT = 1


def encoded(lines: list[str], gz: bool) -> bytes:
    """A window's lines as bytes: UTF-8, or one gzip member (concatenated members are one gzip file)."""
    data = "".join(lines).encode("utf-8")
    return gzip.compress(data, mtime=0) if gz else data


def record_path(output: str) -> str:
    """Where the progress record of a job writing `output` lives."""
    return f"{output}.progress.json"


def read_record(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: not a progress record; remove it to start over") from None
    if record.get("format") != RECORD_FORMAT:
        raise UserError(f"{path}: a progress record of another version; remove it to start over")
    return record


def finished_record(path: str) -> dict | None:
    """The progress record of a job whose output `path` is complete; None while it is not."""
    record = read_record(record_path(path))
    return record if record is not None and record["done"] and os.path.exists(path) else None


def merge_shards(paths: list[str], output: str) -> int:
    """Put the outputs of all N shards of one job back in input order, into `output` (written
    atomically, as one unsharded run would have written it). Returns the lines written."""
    records = []
    for path in paths:
        record = finished_record(path)
        if record is None:
            raise UserError(f"--merge: {path} is not a finished shard (no {record_path(path)} saying it is done)")
        records.append(record)
    count = records[0]["shard"][1]
    by_index = {record["shard"][0]: (path, record) for path, record in zip(paths, records)}
    if sorted(by_index) != list(range(count)) or len(paths) != count:
        raise UserError(f"--merge: needs the {count} shards 0/{count} to {count - 1}/{count} of one job, each once")
    for path, record in zip(paths, records):
        for key in ("settings", "buffer_lines"):
            if record[key] != records[0][key]:
                raise UserError(f"--merge: {path} and {paths[0]} were made with different settings ({key})")
    pending = {k: list(record["windows"]) for k, (_, record) in by_index.items()}
    written = 0
    with contextlib.ExitStack() as files, atomic_path(output) as tmp, open(tmp, "wb") as out:
        readers = {k: files.enter_context(open_binary(path)) for k, (path, _) in by_index.items()}
        for index in range(sum(map(len, pending.values()))):
            k = index % count
            window = pending[k].pop(0)
            lines = [readers[k].readline().decode("utf-8") for _ in range(window["out_lines"])]
            if window["index"] != index or not all(line.endswith("\n") for line in lines):
                raise UserError(f"--merge: {by_index[k][0]} does not hold the lines its record lists")
            out.write(encoded(lines, gz=output.endswith(".gz")))
            written += len(lines)
    return written


def merge_rank_shards(output: str, count: int) -> int:
    """The shards of `count` ranks, each written to Shard(k, count).path(output), merged into
    `output` and removed with their records. Returns the lines written."""
    from mt_transformer.jobs.windows import Shard

    shards = [Shard(k, count).path(output) for k in range(count)]
    lines = merge_shards(shards, output)
    for path in shards:
        os.remove(path)
        os.remove(record_path(path))
    return lines
