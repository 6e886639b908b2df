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
  after ``delete.retention.ms``; its timing is lakelog's clock, not judged here) or an aborted
  transaction's record whose abort marker was appended by then. A transaction's record supersedes
  only once its commit marker was appended (an aborted or open one supersedes nothing). A
  transaction marker (a row whose ``control`` is set) removed while a record of its transaction
  was still in the log is lost too: a reader could no longer tell what the transaction decided;
  once none is left it may go (its ``delete.retention.ms`` is lakelog's clock, as a tombstone's).
  A producer's records belong to the transaction its next marker in the partition ends; a producer
  without a marker there is taken as not transactional (an open transaction of such a producer is
  not told apart);
- ``compaction_resurrected``: a record still in the log while a later tombstone of its key that
  nothing follows was removed: reading the log from its start gives the key a value it no longer
  has;
- ``compaction_phantom``: the log holds now, at an offset, a record that is not the one appended
  there, or holds an offset twice.

A group or stream that never delivered a record compaction removed skipped it (counted, as Kafka's
consumers skip them), unless one of its batches read over the record's offset at a log version
that still held it (``compacted_undelivered``: lakelog's members name the log version each sink
commit read at, an order in the log's own versions, never a clock): then it is ``undelivered``. A
delivery of a record compacted later is fine. Delivery order per key is the checker's
``delivery_reorder``, unchanged.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from deltalake import DeltaTable

from chaos.checker_reads import as_sent, read_current, text
from chaos.checker_txn import ABORTED


def compacted(root: str, topic: str, location: str) -> bool:
    """Whether the topic's latest configuration (``control/topic_configs``) has ``compact`` in its
    ``cleanup.policy``."""
    rows = [r for r in read_current(f"{root}/control/topic_configs")
            if r["topic"] == topic and r["location"].rstrip("/") == location.rstrip("/")]
    if not rows:
        return False
    config = dict(max(rows, key=lambda r: r["config_version"])["config"] or [])
    return "compact" in (config.get("cleanup.policy") or "delete").split(",")


def compacted_undelivered(group: str, record: dict, removed_at: int, reads: dict[int, list[tuple[int, int, int]]],
                          out) -> None:
    """Judge the log ``record`` (with ``_commit_version``) that key compaction removed in log
    version ``removed_at`` and ``group`` never delivered: ``undelivered`` if one of its batches
    (``reads``: per partition (start, end, log version), ``checker_reads.sink_reads``) read over it
    at a log version that held it (appended by then, removed after), else skipped (counted): no
    batch did, or none named its version."""
    p, o = record["partition"], record["offset"]
    held_at = next((v for start, end, v in sorted(reads.get(p, []), key=lambda r: r[2])
                    if start <= o < end and record["_commit_version"] <= v < removed_at), None)
    if held_at is None:
        out.stats[f"compacted_before_read[{group}]"] += 1
    else:
        out.add("undelivered", f"{group}: p{p}@{o} not in its batch read at log version {held_at}, which held it "
                               f"(key compaction removed it in version {removed_at})")


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
                     resizes: list[dict[int, int]], out,
                     states: dict[tuple[int, int], str] | None = None) -> dict[tuple[int, int], int]:
    """Judge a compacted topic: ``log`` its records as appended (``as_sent``, with
    ``_commit_version``), ``current`` the rows it holds now, ``removals`` what key compaction
    removed and when (``compaction_removals``), ``resizes`` the topic's (``checker_reads.resizes``),
    ``states`` its transactional records' (``checker_txn.states``): an aborted record supersedes
    nothing and may go; a marker is no key's record, and may go once no record of its transaction
    is held. Returns the offsets compaction removed and the log version of each removal (a group
    skips those it read over only after it: ``compacted_undelivered``)."""
    states = states or {}
    log = [{**r, "_era": era(r, resizes)} for r in log]
    appended = {(r["partition"], r["offset"]): r for r in log}
    ends, members = _transactions(log)
    aborted = {i for i, m in ends.items() if m is not None and appended[m].get("control") == "abort"}
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in log:
        if (r["key"] is not None and (r["partition"], r["offset"]) not in aborted
                and states.get((r["partition"], r["offset"])) != ABORTED):
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
        if r.get("control") is not None:
            left = [i for i in members.get(ident, []) if i in held or removed.get(i, version) > version]
            if left:
                out.add("compaction_lost", f"p{ident[0]}@{ident[1]} ({r['control']} marker of {r['producer_id']}) "
                                           f"removed in log version {version} while {len(left)} record(s) of its "
                                           f"transaction were still in the log (p{left[0][0]}@{left[0][1]})")
            else:
                out.stats["markers_removed"] += 1
            continue
        if ident in aborted and appended[ends[ident]]["_commit_version"] < version:
            out.stats["aborted_records_removed"] += 1
            continue
        if r["value"] is None and r["key"] is not None:
            out.stats["tombstones_removed"] += 1
            continue
        later = [x for x in by_key.get(text(r["key"]), []) if _precedes(r, x) and _settled(x, ends, appended) < version] \
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
    return removed


def _transactions(log: list[dict]) -> tuple[dict[tuple[int, int], tuple[int, int] | None],
                                             dict[tuple[int, int], list[tuple[int, int]]]]:
    """The transactions of the log's records: each transactional record's marker ((partition,
    offset); None while its transaction is open), and each marker's records. A producer's records
    belong to its next marker in the partition; a producer with no marker in a partition is not
    transactional there (absent)."""
    ends: dict[tuple[int, int], tuple[int, int] | None] = {}
    members: dict[tuple[int, int], list[tuple[int, int]]] = {}
    pending: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    marked: set[tuple[int, str]] = set()
    for r in sorted(log, key=lambda r: (r["partition"], r["offset"])):
        ident, who = (r["partition"], r["offset"]), (r["partition"], r["producer_id"])
        if r.get("control") is None:
            pending[who].append(ident)
            continue
        members[ident] = pending.pop(who, [])
        ends.update((i, ident) for i in members[ident])
        marked.add(who)
    for who, idents in pending.items():
        if who in marked:
            ends.update((i, None) for i in idents)
    return ends, members


def _settled(x: dict, ends: dict, appended: dict) -> float:
    """The log version from which the record ``x`` supersedes its key's earlier records: its own
    (not transactional), its commit marker's (a transaction's), never (open or aborted)."""
    ident = (x["partition"], x["offset"])
    if ident not in ends:
        return x["_commit_version"]
    m = ends[ident]
    if m is None or appended[m].get("control") != "commit":
        return float("inf")
    return appended[m]["_commit_version"]


def _same(r: dict) -> tuple:
    return r["producer_id"], r["sequence"], text(r["key"]), text(r["value"])
