"""What the runner reads from a root's tables, with delta-rs (``chaos.checker``'s readers), never
with lakelog: the replica state, the topic's latest record, and how far a group has consumed."""

from __future__ import annotations

import os
from collections import defaultdict

from deltalake import DeltaTable

from chaos import checker_compaction, checker_reads


def current_replica_state(root: str, topic: str) -> dict | None:
    """A replicated topic's latest replica state (read with delta-rs; None if it has none)."""
    path = f"{root}/control/topic_replicas"
    if not os.path.isdir(f"{path}/_delta_log"):
        return None
    rows = [r for r in checker_reads.read_current(path) if r["topic"] == topic]
    return max(rows, key=lambda r: (r["incarnation"], r["replica_version"])) if rows else None



def group_activity(root: str, group: str) -> int:
    """How many rows ``group`` has written to ``offset_commits`` (positions, claims, generations, expiry
    reports): while it grows, the group is working, however slowly. Read with delta-rs."""
    return sum(1 for c in checker_reads.read_changes(f"{root}/control/offset_commits") if c["group"] == group)



def current_record(root: str, topic: str) -> dict | None:
    """The topic's latest control record (its partitions, modes, undeleted count). Read with delta-rs."""
    history = [r for r in checker_reads.read_current(f"{root}/control/topics") if r["topic"] == topic]
    return max(history, key=lambda r: r["topic_version"]) if history else None


def drain_gap(root: str, topic: str, group: str) -> str | None:
    """Why ``group`` has not consumed every live partition to its log end (None: it has). Read with delta-rs.

    A group stands where it last committed, moved up by what it reported expired; on a live
    partition it never committed, at the start of the partition's current incarnation (a number
    grown back over a retired one starts at the old end: campaign seed 152), or at its log start;
    on a compacted topic, moved over the offsets key compaction removed from there on (librdkafka
    fetches past them, but its position, which a member commits, moves only with a record it
    consumed: campaign seed 4263)."""
    latest = current_record(root, topic)
    if latest is None:
        return "no topic"
    location = checker_reads.log_location(root, topic)
    starts = {p["partition"]: p.get("start_offset") or 0 for p in latest["partitions"] if p["mode"] != "None"}
    raised = checker_reads.log_starts(location, starts)  # retention, delete-records
    starts = {p: max(o, raised.get(p, 0)) for p, o in starts.items()}
    ends: dict[int, int] = defaultdict(int)
    for r in checker_reads.read_log_changes(location):
        ends[r["partition"]] = max(ends[r["partition"]], r["offset"] + 1)
    positions: dict[int, int] = {}
    commits = [c for c in checker_reads.read_changes(f"{root}/control/offset_commits")
               if c["group"] == group and c["topic"] == topic and c["offset"] >= 0
               and c["kind"] in ("commit", "revoke", "reset", "expired")]
    for c in sorted(commits, key=lambda c: c["_commit_version"]):
        if c["kind"] == "expired":
            positions[c["partition"]] = max(positions.get(c["partition"], 0), c["end_offset"])
        else:
            positions[c["partition"]] = c["offset"]
    gaps = {p: (positions.get(p, start), ends.get(p, 0)) for p, start in sorted(starts.items())
            if positions.get(p, start) < ends.get(p, 0)}
    if gaps and checker_compaction.compacted(root, topic, location):
        cleaned = _cleaned(location)
        for p, (pos, end) in list(gaps.items()):
            while pos < end and (p, pos) in cleaned:
                pos += 1
            gaps[p] = (pos, end)
        gaps = {p: (pos, end) for p, (pos, end) in gaps.items() if pos < end}
    return ", ".join(f"p{p} at {pos} of {end}" for p, (pos, end) in gaps.items()) or None


_cleaned_at: dict[str, tuple[int, frozenset]] = {}  # log location -> (its version, what compaction removed by then)


def _cleaned(location: str) -> frozenset:
    """The (partition, offset)s key compaction removed from the log at ``location``
    (``checker_compaction.compaction_removals``), read again only at a new log version: the drain
    asks every few seconds, and each read loads the log at every compaction's version."""
    version = DeltaTable(location).version()
    if _cleaned_at.get(location, (None,))[0] != version:
        _cleaned_at[location] = (version, frozenset(checker_compaction.compaction_removals(location)))
    return _cleaned_at[location][1]
