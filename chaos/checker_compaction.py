"""The checker's rules for a compacted topic (``cleanup.policy`` with ``compact``), read with
delta-rs only, as ``chaos.checker``: what Kafka's log cleaning promises, judged on the log's
records as appended (its change feed, which key compaction's ``dataChange=false`` commits leave
alone) against the records the log holds now and the commits that removed them.

A key's order is the order its records were appended: by the log's commit version, then offset
(the records of one commit and one key are in one partition; across a resize the old partition's
records of a key are appended before the new one's). So a record superseded in another partition
(a key moved by a resize) counts as superseded, whether compaction cleans a topic partition by
partition or across them. Anomalies:

- ``compaction_lost``: a record key compaction removed while no later record of its key had been
  appended by then (the key's latest record removed, or a record with a null key), unless it is a
  tombstone (a tombstone goes after ``delete.retention.ms``; its timing is lakelog's clock, not judged here);
- ``compaction_resurrected``: a record still in the log while its key's latest record, a tombstone,
  was removed: reading the log from its start gives the key a value it no longer has;
- ``compaction_phantom``: the log holds now, at an offset, a record that is not the one appended
  there, or holds an offset twice.

A group or stream that never delivered a record compaction removed skipped it (counted, as Kafka's
consumers skip them); a delivery of a record compacted later is fine. Delivery order per key is
the checker's ``delivery_reorder``, unchanged.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from deltalake import DeltaTable

from chaos.checker_reads import as_sent, read_current, text


def compacted(root: str, topic: str, location: str) -> bool:
    """Whether the topic's latest configuration (``control/topic_configs``) has ``compact`` in its
    ``cleanup.policy``."""
    rows = [r for r in read_current(f"{root}/control/topic_configs")
            if r["topic"] == topic and r["location"].rstrip("/") == location.rstrip("/")]
    if not rows:
        return False
    config = dict(max(rows, key=lambda r: r["config_version"])["config"] or [])
    return "compact" in (config.get("cleanup.policy") or "delete").split(",")


def compaction_removals(location: str) -> dict[tuple[int, int], int]:
    """(partition, offset) -> the log version whose OPTIMIZE commit (key compaction, or file
    compaction and layout moves, which remove nothing) took the record out of the log. lakelog's
    own engine commits OPTIMIZE as Delta's WRITE with ``lakelog.operation`` OPTIMIZE in its commit
    info (docs/storage-format.md); Spark's Delta writer as OPTIMIZE."""
    table = DeltaTable(location)
    versions = [h["version"] for h in table.history()
                if "OPTIMIZE" in (h.get("operation"), h.get("lakelog.operation"))]
    out: dict[tuple[int, int], int] = {}
    for v in sorted(versions):
        before, after = (_offsets(DeltaTable(location, version=x)) for x in (v - 1, v))
        for ident in before - after:
            out.setdefault(ident, v)
    return out


def _offsets(table: DeltaTable) -> set[tuple[int, int]]:
    rows = table.to_pyarrow_table(columns=["partition", "offset"])
    return set(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist()))


def _order(r: dict) -> tuple[int, int]:
    return r["_commit_version"], r["offset"]


def check_compaction(log: list[dict], current: list[dict], removals: dict[tuple[int, int], int], out) -> set[tuple[int, int]]:
    """Judge a compacted topic: ``log`` its records as appended (``as_sent``, with
    ``_commit_version``), ``current`` the rows it holds now, ``removals`` what key compaction
    removed and when (``compaction_removals``). Returns the offsets compaction removed (groups
    skip them)."""
    appended = {(r["partition"], r["offset"]): r for r in log}
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in log:
        if r["key"] is not None:
            by_key[text(r["key"])].append(r)
    for rows in by_key.values():
        rows.sort(key=_order)
    held: dict[tuple[int, int], dict] = {}
    for r in as_sent(current):
        ident = (r["partition"], r["offset"])
        src = appended.get(ident)
        if ident in held:
            out.add("compaction_phantom", f"p{ident[0]}@{ident[1]} is in the log twice")
        elif src is None or _same(src) != _same(r):
            out.add("compaction_phantom", f"p{ident[0]}@{ident[1]} holds {_same(r)}, appended there: "
                                          f"{None if src is None else _same(src)}")
        held[ident] = r
    removed = {ident: v for ident, v in removals.items() if ident in appended and ident not in held}
    for ident, version in sorted(removed.items()):
        r = appended[ident]
        if r["value"] is None and r["key"] is not None:
            out.stats["tombstones_removed"] += 1
            continue
        later = [x for x in by_key.get(text(r["key"]), []) if _order(x) > _order(r) and x["_commit_version"] < version] \
            if r["key"] is not None else []
        if later:
            out.stats["records_compacted"] += 1
        else:
            out.add("compaction_lost", f"p{ident[0]}@{ident[1]} ({r['producer_id']}#{r['sequence']} key "
                                       f"{text(r['key'])!r}) removed in log version {version} with no later record "
                                       "of its key appended by then")
    for key, rows in by_key.items():
        latest = rows[-1]
        ident = (latest["partition"], latest["offset"])
        if latest["value"] is not None or ident not in removed:
            continue
        alive = [x for x in rows[:-1] if (x["partition"], x["offset"]) in held]
        if alive:
            x = alive[-1]
            out.add("compaction_resurrected", f"key {key!r}: its latest record, the tombstone at p{ident[0]}@{ident[1]}, "
                                              f"was removed (log version {removed[ident]}) while p{x['partition']}@"
                                              f"{x['offset']} ({x['producer_id']}#{x['sequence']}) stays", len(alive))
    out.stats["compacted_topic"] = 1
    out.stats["log_records_now"] = len(held)
    return set(removed)


def _same(r: dict) -> tuple:
    return r["producer_id"], r["sequence"], text(r["key"]), text(r["value"])
