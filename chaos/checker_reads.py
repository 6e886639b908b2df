"""What the campaign's checker reads, with delta-rs only (never lakelog's own readers): tables'
rows and change feeds, a topic's history, its resizes and log location, log starts and what their
raises took, retired partitions, the sinks' commit groups and the log versions their batches
read, the producers' inputs; and records written through `lakelog serve` named as their producers
sent them (``as_sent``). The checks are in ``chaos.checker``."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
from deltalake import DeltaTable


def _exists(path: str) -> bool:
    return Path(path, "_delta_log").is_dir()


def _rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def read_changes(path: str) -> list[dict]:
    """Every row ever inserted into the table at ``path``, with ``_commit_version`` (change feed)."""
    if not _exists(path):
        return []
    table = pa.table(DeltaTable(path).load_cdf(starting_version=0).read_all())
    rows = _rows(table)
    return [r for r in rows if r["_change_type"] == "insert"]


def read_log_changes(path: str) -> list[dict]:
    """Every record ever appended to the topic log at ``path`` (change feed inserts), less those a
    replica's truncation took out (a returning old leader's records past where the next leader
    epoch began: the DELETE commits whose metadata says ``truncate``; a retirement's purge or a
    retention's deletes keep their records, which were appended)."""
    if not _exists(path):
        return []
    table = DeltaTable(path)
    truncations = {h["version"] for h in table.history()
                   if '"lakelog":"truncate"' in (h.get("userMetadata") or "")}
    rows = _rows(pa.table(table.load_cdf(starting_version=0).read_all()))
    gone: dict[tuple[int, int], int] = {}  # offset -> the last truncation that deleted it
    for r in rows:
        if r["_change_type"] == "delete" and r["_commit_version"] in truncations:
            key = (r["partition"], r["offset"])
            gone[key] = max(gone.get(key, -1), r["_commit_version"])
    return [r for r in rows if r["_change_type"] == "insert"
            and r["_commit_version"] >= gone.get((r["partition"], r["offset"]), -1)]


SERVED = "kafka-"  # the producer ids `lakelog serve` gives Kafka producers' records (docs/serve.md)


def as_sent(rows: Iterable[dict]) -> list[dict]:
    """Log or sink rows, each record a Kafka producer wrote through `lakelog serve`, or a stream
    wrote through format("lakelog") (producer id ``<producerId>:<query id>``, docs/spark.md), under
    the producer and sequence its value names (``kp:17``: producer ``kp``, sequence 17); other rows,
    and such rows whose value names none, as they are. (lakelog's own consumers copy the log's
    ids into their sinks.)"""
    out = []
    for r in rows:
        pid = r["producer_id"] or ""
        if pid.startswith(SERVED) or ":" in pid:
            name, sep, seq = (text(r["value"]) or "").rpartition(":")
            if sep and name and seq.isdigit() and (pid.startswith(SERVED) or pid.startswith(f"{name}:")):
                r = {**r, "producer_id": name, "sequence": int(seq)}
        out.append(r)
    return out


def read_current(path: str) -> list[dict]:
    if not _exists(path):
        return []
    return _rows(DeltaTable(path).to_pyarrow_table())


def text(value: Any) -> str | None:
    if value is None:
        return None
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray, memoryview)) else str(value)


def topic_history(root: str, topic: str) -> list[dict]:
    """The topic's records since its latest creation (a topic deleted and created again is new)."""
    rows = sorted((r for r in read_current(f"{root}/control/topics") if r["topic"] == topic),
                  key=lambda r: r["topic_version"])
    created = [i for i, r in enumerate(rows) if r.get("event") == "create"]
    return rows[created[-1]:] if created else rows


def log_location(root: str, topic: str) -> str:
    """Where the topic's current log is: its latest record's location (default layout if none)."""
    history = topic_history(root, topic)
    return (history[-1].get("location") if history else None) or f"{root}/topics/{topic}"


def log_starts(location: str, partitions: Iterable[int]) -> dict[int, int]:
    """Each partition's log start offset where retention or delete-records raised it: the log's
    set transaction ``lakelog.log_start.<p>`` (docs/storage-format.md)."""
    if not _exists(location):
        return {}
    table = DeltaTable(location)
    out = {}
    for p in partitions:
        version = table.transaction_version(f"lakelog.log_start.{int(p)}")
        if version is not None:
            out[int(p)] = int(version)
    return out


def removed_while_live(location: str, partitions: Iterable[int]) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the offsets [incarnation start, log start) each raise of its log start took
    out while the partition was live, walking the log's versions: a raise of the set transaction
    ``lakelog.log_start.<p>`` at a version whose properties do not say the partition was retired
    (``lakelog.partition.<p>.mode`` None), from the start of the incarnation then live
    (``lakelog.partition.<p>.start_offset``, absent 0). Those records were gone before any later
    retirement of their partition: the retirement did not expire them (campaign seed 1003). The
    current log start alone cannot tell: a grown-back number's raise hides the earlier ones."""
    partitions = sorted({int(p) for p in partitions})
    if not log_starts(location, partitions):  # log starts only rise: never raised
        return {}
    table = DeltaTable(location)
    last: dict[int, int] = {}
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for version in range(table.version() + 1):
        table.load_as_version(version)
        config = None
        for p in partitions:
            start = table.transaction_version(f"lakelog.log_start.{p}")
            if start is None or start <= last.get(p, -1):
                continue
            last[p] = start
            config = config if config is not None else table.metadata().configuration
            if config.get(f"lakelog.partition.{p}.mode") != "None":
                first = int(config.get(f"lakelog.partition.{p}.start_offset") or 0)
                if start > first:
                    out[p].append((first, start))
    return dict(out)


def retired_before(history: list[dict], version: int) -> dict[int, int]:
    """Per partition, the end of its latest incarnation retired at or before topic ``version``."""
    out: dict[int, int] = {}
    for rec in history:
        if rec["topic_version"] > version:
            break
        for p in rec["partitions"]:
            if p["mode"] == "None" and p.get("end_offset") is not None:
                out[p["partition"]] = max(out.get(p["partition"], 0), p["end_offset"])
    return out


def retired_ends(history: list[dict]) -> dict[int, list[int]]:
    """Per partition, the final ends of every retired incarnation (ascending)."""
    ends: dict[int, set[int]] = defaultdict(set)
    for rec in history:
        for p in rec["partitions"]:
            if p["mode"] == "None" and p.get("end_offset") is not None:
                ends[p["partition"]].add(p["end_offset"])
    return {p: sorted(v) for p, v in ends.items()}


def resizes(history: list[dict]) -> list[dict[int, int]]:
    """The topic's resizes, oldest first (``history``: ``topic_history``), each as every partition's
    leader epoch in the record just before it: a record whose ``undeleted_partition_count`` (what
    producers partition keys over) differs from its predecessor's. A resize bumped the epoch of
    each partition it repartitioned, and a partition takes no record after it is marked for
    deletion, so a log record of partition p at epoch e was appended after the resize iff e is
    above p's epoch there, or p did not exist yet; a reused number's new incarnation starts above
    its retired one's epoch."""
    out = []
    for prev, rec in zip(history, history[1:]):
        if rec.get("undeleted_partition_count") != prev.get("undeleted_partition_count"):
            out.append({p["partition"]: p["leader_epoch"] for p in prev["partitions"]})
    return out


def _sink_commits(sink: str) -> Iterable[tuple[int, dict]]:
    """Each sink commit lakelog's metadata names (JSON with ``"lakelog": "sink"`` in Delta's
    ``userMetadata``): its version and that metadata."""
    for c in DeltaTable(sink).history():
        try:
            meta = json.loads(c.get("userMetadata") or "null")
        except ValueError:
            continue
        if isinstance(meta, dict) and meta.get("lakelog") == "sink":
            yield int(c["version"]), meta


def sink_commit_groups(sink: str) -> dict[int, str]:
    """Sink version -> the group whose batch it committed, from the commit's metadata (JSON with
    ``"lakelog": "sink"`` and the group, in Delta's ``userMetadata``): several groups may write one
    sink, and each is judged on its own commits. Commits without it count for every group."""
    return {v: meta["group"] for v, meta in _sink_commits(sink) if isinstance(meta.get("group"), str)}


def sink_reads(sink: str, group: str, topic: str, location: str) -> dict[int, list[tuple[int, int, int]]]:
    """Per partition, (start, end, log version) of each batch ``group`` committed to ``sink`` from
    ``topic``'s log at ``location`` that names the version of that log it was read at
    (``log_version``: lakelog's members name it; a Kafka member's or a stream's sink does not):
    every record of [start, end) that version held is in the batch."""
    out: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    if not _exists(sink):
        return out
    for _v, meta in _sink_commits(sink):
        log, version = meta.get("log"), meta.get("log_version")
        if (meta.get("group") != group or meta.get("topic") != topic or not isinstance(version, int)
                or not isinstance(log, str) or log.rstrip("/") != location.rstrip("/")):
            continue
        for p, (start, end) in (meta.get("ranges") or {}).items():
            out[int(p)].append((int(start), int(end), version))
    return out


def stream_since(checkpoint: str, topic: str) -> int | None:
    """The topic version a stream first read ``topic`` at: ``since`` of the topic in the earliest
    offset its checkpoint's offset log holds (``offsets/<batch>``: a version line, Spark's
    metadata, then one line per source; lakelog's is ``{"v": 1, "topics": {topic: {"since": ...}}}``,
    docs/spark.md). None if the stream never planned a batch."""
    folder = Path(checkpoint, "offsets")
    batches = sorted(int(f.name) for f in folder.iterdir() if f.name.isdigit()) if folder.is_dir() else []
    for batch in batches:
        for line in (folder / str(batch)).read_text().splitlines()[2:]:
            try:
                offset = json.loads(line)
            except ValueError:
                continue
            since = ((offset.get("topics") or {}).get(topic) or {}).get("since") if isinstance(offset, dict) else None
            if since is not None:
                return int(since)
    return None


def read_inputs(paths: dict[str, str]) -> dict[str, dict[int, str]]:
    """Each producer's input file: sequence (line number - 1) -> key."""
    out: dict[str, dict[int, str]] = {}
    for pid, path in paths.items():
        with open(path) as fh:
            out[pid] = {i: json.loads(line).get("key") for i, line in enumerate(fh) if line.strip()}
    return out
