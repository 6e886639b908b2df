"""The checker's rules for a compacted topic (``cleanup.policy`` with ``compact``), read with
delta-rs only, as ``chaos.checker``: what Kafka's log cleaning promises, judged on the log's
records as appended (its change feed, which key compaction's ``dataChange=false`` commits leave
alone) against the records the log holds now and the commits that removed them.

A key's order is the one the resize gates deliver (docs/design.md, key compaction across
resizes): a record's *era* is how many of the topic's resizes it was appended after (its
``leader_epoch`` against the epochs in the topic's history, ``checker_reads.resizes``); a record
of an earlier era precedes every record of a later one, in whichever partition, and within a
partition offsets order them. Records of one era in different partitions (a producer that chose
a partition other than the partitioner's) have no order: each partition is judged alone there,
as Kafka cleans. Anomalies:

- ``compaction_lost``: a record key compaction removed while no later record of its key had been
  appended by then (the key's latest record removed, one superseded only by a record of its era
  in another partition, or a record with a null key), unless it is a tombstone (a tombstone goes
  after ``delete.retention.ms``; its timing is lakelog's clock, not judged here);
- ``compaction_resurrected``: a record still in the log while a later tombstone of its key that
  nothing follows was removed: reading the log from its start gives the key a value it no longer
  has;
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
from chaos.checker_txn import ABORTED, is_marker


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


def era(r: dict, resizes: list[dict[int, int]]) -> int:
    """How many of ``resizes`` (``checker_reads.resizes``) the log record ``r`` was appended after."""
    return sum(r["partition"] not in before or r["leader_epoch"] > before[r["partition"]] for before in resizes)


def _precedes(x: dict, y: dict) -> bool:
    """Whether ``x`` is before ``y`` in their key's order (both with ``_era``)."""
    return x["_era"] < y["_era"] or (x["partition"] == y["partition"] and x["offset"] < y["offset"])


def check_compaction(log: list[dict], current: list[dict], removals: dict[tuple[int, int], int],
                     resizes: list[dict[int, int]], out, states: dict[tuple[int, int], str] | None = None) -> set[tuple[int, int]]:
    """Judge a compacted topic: ``log`` its records as appended (``as_sent``, with
    ``_commit_version``), ``current`` the rows it holds now, ``removals`` what key compaction
    removed and when (``compaction_removals``), ``resizes`` the topic's (``checker_reads.resizes``),
    ``states`` its transactional records' (``checker_txn.states``): an aborted record supersedes
    nothing and may go; a marker is no key's record, and may go once no record of its transaction
    is held. Returns the offsets compaction removed (groups skip them)."""
    states = states or {}
    log = [{**r, "_era": era(r, resizes)} for r in log]
    appended = {(r["partition"], r["offset"]): r for r in log}
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in log:
        if r["key"] is not None and states.get((r["partition"], r["offset"])) != ABORTED:
            by_key[text(r["key"])].append(r)
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
        if states.get(ident) == ABORTED:
            out.stats["aborted_removed"] += 1
            continue
        if is_marker(r):
            kept = _transaction_held(ident, r["producer_id"], appended, held)
            if kept:
                out.add("compaction_lost", f"p{ident[0]}@{ident[1]} (the {r['control']} marker of {r['producer_id']}) "
                                           f"removed in log version {version} while its transaction's records stay, "
                                           f"first at p{ident[0]}@{kept[0]}")
            else:
                out.stats["markers_removed"] += 1
            continue
        if r["value"] is None and r["key"] is not None:
            out.stats["tombstones_removed"] += 1
            continue
        later = [x for x in by_key.get(text(r["key"]), []) if _precedes(r, x) and x["_commit_version"] < version] \
            if r["key"] is not None else []
        if later:
            out.stats["records_compacted"] += 1
        else:
            out.add("compaction_lost", f"p{ident[0]}@{ident[1]} ({r['producer_id']}#{r['sequence']} key "
                                       f"{text(r['key'])!r}, era {r['_era']}) removed in log version {version} with "
                                       "no later record of its key appended by then")
    for key, rows in by_key.items():
        top = max(r["_era"] for r in rows)
        ends = {r["partition"]: r["offset"] for r in sorted(rows, key=lambda r: r["offset"])}
        gone = [r for r in rows if r["_era"] == top and r["offset"] == ends[r["partition"]]  # nothing follows them
                and r["value"] is None and (r["partition"], r["offset"]) in removed]
        alive = sorted({(x["partition"], x["offset"]) for x in rows for t in gone
                        if _precedes(x, t) and (x["partition"], x["offset"]) in held})
        if alive:
            x = appended[alive[-1]]
            t = next(t for t in gone if _precedes(x, t))
            out.add("compaction_resurrected", f"key {key!r}: its tombstone at p{t['partition']}@{t['offset']} (era "
                                              f"{t['_era']}), which nothing follows, was removed (log version "
                                              f"{removed[(t['partition'], t['offset'])]}) while p{x['partition']}@"
                                              f"{x['offset']} ({x['producer_id']}#{x['sequence']}, era {x['_era']}) "
                                              "stays", len(alive))
    out.stats["compacted_topic"] = 1
    out.stats["log_records_now"] = len(held)
    return set(removed)


def _transaction_held(marker: tuple[int, int], pid: str, appended: dict[tuple[int, int], dict],
                      held: dict[tuple[int, int], dict]) -> list[int]:
    """The offsets of the records of the transaction ``marker`` ended (``pid``'s in its partition
    after its marker before) that the log still holds."""
    p, at = marker
    before = max((o for (q, o), r in appended.items() if q == p and o < at and is_marker(r) and r["producer_id"] == pid),
                 default=-1)
    return sorted(o for (q, o), r in held.items() if q == p and before < o < at and r["producer_id"] == pid
                  and not is_marker(r))


def _same(r: dict) -> tuple:
    return r["producer_id"], r["sequence"], text(r["key"]), text(r["value"])
