"""The campaign's independent checker: reads a root's tables with delta-rs, not with lakelog.

It imports nothing from lakelog: it knows only the on-disk format (docs/storage-format.md) and
reads every table with the ``deltalake`` package (delta-rs), so a bug in lakelog's own readers
cannot hide a bug in its writers. It reports Jepsen-style anomaly classes for one topic:

- the log (its change feed: every record ever appended, also those of retired partitions):
  ``lost_acknowledged``, ``log_duplicate``, ``log_phantom``, ``offset_reuse``, ``offset_gap``,
  ``epoch_decrease``, ``log_key_reorder``;
- each group's Delta sink (delivery order = the sink's commit order): ``sink_duplicate``,
  ``sink_phantom`` (delivered, but not the record the current leader's log holds at that offset:
  another producer id, sequence or key, or an offset a truncation took out and nothing refilled),
  ``delivery_reorder`` (a record delivered after a later record of its key),
  ``undelivered`` (never delivered, partition still live), ``expired_unreported`` (its partition
  was retired before the group delivered it, or retention or delete-records removed it while the
  group stood at or below it, and the group did not report it expired);
- each group's control rows: ``two_owners``, ``position_backwards``, ``position_beyond_end``,
  ``duplicate_generation``;
- the control plane's commit-order labels (``commit_order``: lakelog orders positions and
  member states by them): ``order_label_disagrees`` when, for one partition's positions, one
  member's states, or a group's rows around its deletion, the labels do not rise strictly
  with Delta's commit versions, or a label is above its row's commit version.

A stream reading the topic with the ``group`` option is judged as a group: its Delta sink has
Kafka's columns (no producer id or sequence), so each row is the log record at its offset when it
holds that record's key and value (``named_by_log``), and its view starts at the topic version its
checkpoint says it first read the topic at.

A log with transactions (``chaos.checker_txn``): a marker is no record (not a duplicate, phantom
or key's record; its offset is taken); a group owes and may deliver what its isolation level
reads (``read_committed`` names the groups that read so): ``marker_delivered``,
``aborted_delivered``, ``open_delivered``.

A compacted topic (``cleanup.policy`` with ``compact``) is also judged by what log cleaning
promises (``chaos.checker_compaction``: ``compaction_lost``, ``compaction_resurrected``,
``compaction_phantom``); what it removed is not owed to a group that never delivered it.

Records a group reported expired are counted (``expired``), not flagged. A group's view starts at
its first generation: partitions retired before it (by topic version) are not expected of it.

A record a Kafka producer wrote through `lakelog serve` carries the server's producer id
(``kafka-<id>-<partition the client addressed>``) and sequence (epoch, wrap count and Kafka's
sequence in one number); it is judged as the record its value names (``as_sent``): the campaign's
Kafka producer sends its input's ``<producer>:<n>``, as lakelog's producers do, and a Kafka
group's sink rows name the same. So every rule above applies to it unchanged.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from chaos.checker_compaction import check_compaction, compacted, compaction_removals, compacted_undelivered
from chaos.checker_order import check_commit_order
from chaos import checker_txn
from chaos.checker_txn import Transactions
from chaos.checker_reads import (
    as_sent, log_location, log_starts, read_changes, read_current, read_inputs, read_log_changes,
    removed_while_live, resizes, retired_before, retired_ends, sink_commit_groups, sink_reads, stream_since, text,
    topic_history,
)

ANOMALIES = (
    "lost_acknowledged", "log_duplicate", "log_phantom", "offset_reuse", "offset_gap", "epoch_decrease",
    "log_key_reorder", "sink_duplicate", "sink_phantom", "delivery_reorder", "undelivered",
    "expired_unreported", "two_owners", "position_backwards", "position_beyond_end", "duplicate_generation",
    "order_label_disagrees", "replica_divergence", "compaction_lost", "compaction_resurrected", "compaction_phantom",
    "marker_delivered", "aborted_delivered", "open_delivered",
)
SAMPLES = 5


@dataclass
class Findings:
    """Anomalies by class (each with a count and a few samples) and counters that are not anomalies."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    samples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    stats: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, what: str, n: int = 1) -> None:
        self.counts[kind] += n
        if len(self.samples[kind]) < SAMPLES:
            self.samples[kind].append(what)

    @property
    def anomalies(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> dict[str, Any]:
        return {"anomalies": {k: v for k, v in self.counts.items() if v}, "samples": dict(self.samples),
                "stats": dict(self.stats)}


def replica_divergence(locations: list[str]) -> list[str]:
    """Offsets at which two roots' copies of a log hold different records, below both log ends:
    what replication must never leave (each root's rows as they are now, read with delta-rs)."""
    copies = []
    for path in locations:
        rows = read_current(path)
        copies.append({(r["partition"], r["offset"]): (r["producer_id"], r["sequence"], r["leader_epoch"]) for r in rows})
    out = []
    first = copies[0]
    for path, other in zip(locations[1:], copies[1:]):
        for key in sorted(set(first) & set(other)):
            if first[key] != other[key]:
                out.append(f"{path}: partition {key[0]} offset {key[1]} holds {other[key]}, the leader {first[key]}")
    return out


# -- the log ---------------------------------------------------------------------------------
def removed_before_copied(leader: str, rows: list[dict], other_logs: Iterable[str],
                          retired: dict[int, list[int]] | None = None) -> list[dict]:
    """Records other roots' logs hold below the leader's log start that the leader's own change
    feed never had: retention or delete-records removed them at an earlier leader before this root
    copied that partition (a follower starts at its leader's log start), then this root was
    elected. They were appended, and a group may have read them before their removal (campaign
    seed 1652); offsets below a log start are never written again, so each is the one record there.
    Likewise below a retired incarnation's final end (``retired``: per partition, from
    ``retired_ends``): a copy never carries a retired partition's records, so an old leader elected
    again after its successor's purge never had the successor's records there."""
    elsewhere = [r for path in other_logs for r in read_log_changes(path)]
    starts = log_starts(leader, {r["partition"] for r in elsewhere})
    for p, ends in (retired or {}).items():
        starts[p] = max(starts.get(p, 0), max(ends, default=0))
    held = {(r["partition"], r["offset"]) for r in rows}
    found: dict[tuple[int, int], dict] = {}
    for r in elsewhere:
        key = (r["partition"], r["offset"])
        if key not in held and key not in found and r["offset"] < starts.get(r["partition"], 0):
            found[key] = r
    return list(found.values())


def check_log(log: list[dict], inputs: dict[str, dict[int, str]], acked: dict[str, set[int]], out: Findings) -> None:
    by_record: dict[tuple[str, int], list[dict]] = defaultdict(list)
    by_partition: dict[int, list[dict]] = defaultdict(list)
    for r in log:
        by_partition[r["partition"]].append(r)
        if checker_txn.is_marker(r):  # it takes an offset, but is no producer's record
            out.stats["log_markers"] += 1
        elif r["producer_id"] is not None:
            by_record[(r["producer_id"], r["sequence"])].append(r)
    out.stats["log_records"] = len(log) - out.stats["log_markers"]
    for (pid, seq), copies in by_record.items():
        if len(copies) > 1:
            out.add("log_duplicate", f"{pid}#{seq} at " + ", ".join(f"p{c['partition']}@{c['offset']}" for c in copies),
                    len(copies) - 1)
        want = inputs.get(pid, {}).get(seq)
        if pid in inputs and (want is None or want != text(copies[0]["key"])):
            out.add("log_phantom", f"{pid}#{seq} key {text(copies[0]['key'])!r} is not in the input (expected {want!r})")
    for pid, seqs in acked.items():
        lost = sorted(s for s in seqs if (pid, s) not in by_record)
        if lost:
            out.add("lost_acknowledged", f"{pid}: {len(lost)} acknowledged records missing, first {lost[:5]}", len(lost))
    for p, rows in sorted(by_partition.items()):
        rows.sort(key=lambda r: (r["offset"], r["_commit_version"]))
        expect = 0
        last_epoch = -1
        last_seq: dict[tuple, int] = {}
        for r in rows:
            if r["offset"] < expect:
                out.add("offset_reuse", f"p{p}@{r['offset']} written again in version {r['_commit_version']}")
                continue
            if r["offset"] > expect:
                out.add("offset_gap", f"p{p}: offsets {expect}..{r['offset'] - 1} missing", r["offset"] - expect)
            expect = r["offset"] + 1
            if r["leader_epoch"] < last_epoch:
                out.add("epoch_decrease", f"p{p}@{r['offset']}: epoch {r['leader_epoch']} after {last_epoch}")
            last_epoch = max(last_epoch, r["leader_epoch"])
            if r["key"] is not None and r["producer_id"] is not None and not checker_txn.is_marker(r):
                k = (r["producer_id"], text(r["key"]))
                if r["sequence"] < last_seq.get(k, -1):
                    out.add("log_key_reorder", f"p{p}@{r['offset']}: {k[0]}/{k[1]} sequence {r['sequence']} after "
                                               f"{last_seq[k]}")
                last_seq[k] = max(last_seq.get(k, -1), r["sequence"])


# -- a group -------------------------------------------------------------------------------------


def check_group(root: str, topic: str, group: str, sink: str, log: list[dict], out: Findings,
                removed: dict[int, list[tuple[int, int]]], since: int | None = None,
                cleaned: dict[tuple[int, int], int] | None = None, txn: Transactions | None = None) -> None:
    """``removed``: ``removed_while_live`` of the topic's log. ``since``: a stream's group (no
    generations): the topic version the stream first read the topic at (``stream_since``).
    ``cleaned``: the offsets key compaction removed and the log version of each removal (a
    compacted topic: ``check_compaction``). ``txn``: the log's transactions and the level the
    group read at (default: read_uncommitted)."""
    txn = txn or Transactions()
    history = topic_history(root, topic)
    generations = sorted((g for g in read_current(f"{root}/control/group_generations") if g["group"] == group),
                         key=lambda g: g["generation"])
    commits = [c for c in read_changes(f"{root}/control/offset_commits") if c["group"] == group]
    commits.sort(key=lambda c: c["_commit_version"])
    first_version = since or 0
    if generations:
        first_version = dict(generations[0].get("topic_versions") or []).get(topic, 0)
    excluded = retired_before(history, first_version)
    expected = {(r["partition"], r["offset"]): r for r in log if r["offset"] >= excluded.get(r["partition"], 0)
                and txn.owed(r)}
    reads = sink_reads(sink, group, topic, log_location(root, topic)) if cleaned else {}
    check_sink(group, sink, topic, log, expected, commits, history, out, removed, cleaned, txn, reads)
    check_ownership(group, topic, generations, commits, out)
    check_positions(group, topic, commits, log, out)


def _expired_ranges(commits: list[dict], topic: str) -> dict[int, list[tuple[int, int]]]:
    ranges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for c in commits:
        if c["kind"] == "expired" and c["topic"] == topic:
            ranges[c["partition"]].append((c["offset"], c["end_offset"]))
    return ranges


def check_sink(group: str, sink: str, topic: str, log: list[dict], expected: dict[tuple[int, int], dict],
               commits: list[dict], history: list[dict], out: Findings,
               removed: dict[int, list[tuple[int, int]]], cleaned: dict[tuple[int, int], int] | None = None,
               txn: Transactions | None = None, reads: dict[int, list[tuple[int, int, int]]] | None = None) -> None:
    """``removed``: the offsets retention or delete-records took out while their partition was
    live (``removed_while_live``). A record there that the group neither delivered nor reported
    expired is ``expired_unreported`` if the group ever stood at or below it (it was to read it);
    otherwise it was deleted before the group came near it (a group without a position starts at
    the log start), counted, not flagged, also if its partition was retired later. ``cleaned``:
    the offsets key compaction removed (and in which log version); one the group never delivered it
    skipped, as Kafka's consumers do (counted), unless one of its batches (``reads``:
    ``checker_reads.sink_reads``) read over it while the log held it (``undelivered``). ``txn``:
    what of the log the group may deliver (``checker_txn``)."""
    txn, cleaned = txn or Transactions(), cleaned or {}
    in_log = {(r["partition"], r["offset"]): r for r in log}
    others = {v for v, owner in sink_commit_groups(sink).items() if owner != group}  # a sink groups share
    # a stream's rows, and a Kafka member's tombstones (no value to name them by), as the log names them
    rows = [r if r.get("producer_id") is not None or ("producer_id" in r and r["value"] is not None)
            else named_by_log(r, in_log)
            for r in read_changes(sink) if r["topic"] == topic and r["_commit_version"] not in others]
    delivered = sorted(as_sent(rows), key=lambda r: (r["_commit_version"], r["partition"], r["offset"]))
    seen: set[tuple[int, int]] = set()
    last_seq: dict[tuple, tuple[int, tuple]] = {}
    for r in delivered:
        ident = (r["partition"], r["offset"])
        src = in_log.get(ident)
        if src is None or _record(src) != _record(r):  # delivered, but not the record the log holds there
            held = "nothing" if src is None else "{}#{} key {!r}".format(*_record(src))
            out.add("sink_phantom", f"{group}: p{ident[0]}@{ident[1]} ({r['producer_id']}#{r['sequence']} key "
                                    f"{text(r['key'])!r}) is not that log record: the log holds {held} there")
            continue  # and the record the log holds there is still to be delivered
        wrong = txn.forbidden(src)
        if wrong is not None:
            out.add(wrong, f"{group}: p{ident[0]}@{ident[1]} ({src['producer_id']}#{src['sequence']}) delivered in "
                           f"version {r['_commit_version']}")
            continue
        if ident in seen:
            out.add("sink_duplicate", f"{group}: p{ident[0]}@{ident[1]} delivered again in version {r['_commit_version']}")
            continue
        seen.add(ident)
        if r["key"] is None or r["producer_id"] is None:
            continue
        k = (r["producer_id"], text(r["key"]))
        prev = last_seq.get(k)
        if prev is not None and r["sequence"] < prev[0]:
            out.add("delivery_reorder", f"{group}: {k[0]}/{k[1]} #{r['sequence']} (p{ident[0]}@{ident[1]}, v{r['_commit_version']}) "
                                        f"after #{prev[0]} (p{prev[1][0]}@{prev[1][1]})")
        if prev is None or r["sequence"] > prev[0]:
            last_seq[k] = (r["sequence"], ident)
    out.stats[f"delivered[{group}]"] = len(seen)
    expired = _expired_ranges(commits, topic)
    retired = retired_ends(history)
    stood: dict[int, int] = {}  # the lowest position the group ever committed per partition
    for c in commits:
        if c["topic"] == topic and c["kind"] in ("commit", "revoke", "reset") and c["offset"] >= 0:
            stood[c["partition"]] = min(stood.get(c["partition"], c["offset"]), c["offset"])
    for ident in sorted(set(expected) - seen):
        p, o = ident
        if any(lo <= o < hi for lo, hi in expired.get(p, [])):
            out.stats[f"expired[{group}]"] += 1
            continue
        if ident in cleaned:
            compacted_undelivered(group, expected[ident], cleaned[ident], reads or {}, out)
            continue
        if any(lo <= o < hi for lo, hi in removed.get(p, [])):
            if stood.get(p, o + 1) <= o:
                out.add("expired_unreported", f"{group}: p{p}@{o} was deleted below the log start undelivered "
                                              "and not reported expired")
            else:
                out.stats[f"deleted_before_read[{group}]"] += 1
            continue
        if any(o < end for end in retired.get(p, [])):
            out.add("expired_unreported", f"{group}: p{p}@{o} was retired undelivered and not reported expired")
        else:
            out.add("undelivered", f"{group}: p{p}@{o} ({expected[ident]['producer_id']}#{expected[ident]['sequence']}) never delivered")
    for ident in seen:
        if any(lo <= ident[1] < hi for lo, hi in expired.get(ident[0], [])):
            out.stats[f"expired_but_delivered[{group}]"] += 1


def named_by_log(row: dict, in_log: dict[tuple[int, int], dict]) -> dict:
    """A row of a stream's sink (Kafka's columns: no producer id or sequence) under the producer id
    and sequence of the log record at its offset if it holds that record's key and value, else
    under none (then it is not that record: ``sink_phantom``)."""
    src = in_log.get((row["partition"], row["offset"]))
    same = src is not None and text(src["key"]) == text(row["key"]) and text(src["value"]) == text(row["value"])
    return {**row, "producer_id": src["producer_id"] if same else None, "sequence": src["sequence"] if same else None}


def _record(row: dict) -> tuple:
    """What makes a row the record it is: its producer id, sequence and key."""
    return row["producer_id"], row["sequence"], text(row["key"])


def _tp(x: Any) -> tuple[str, int]:
    return (x["topic"], x["partition"])


def check_ownership(group: str, topic: str, generations: list[dict], commits: list[dict], out: Findings) -> None:
    numbers = [g["generation"] for g in generations]
    for n in sorted(set(numbers)):
        if numbers.count(n) > 1:
            out.add("duplicate_generation", f"{group}: generation {n} written {numbers.count(n)} times")
    members_of: dict[int, set[str]] = {}
    for g in generations:
        members_of[g["generation"]] = {m["member_id"] for m in g["members"] or []}
        owner: dict[tuple, str] = {}
        for a in g["assignment"] or []:
            for tp in a["partitions"] or []:
                if _tp(tp) in owner:
                    out.add("two_owners", f"{group} generation {g['generation']}: {tp['topic']}-{tp['partition']} "
                                          f"assigned to {owner[_tp(tp)]} and {a['member_id']}")
                owner[_tp(tp)] = a["member_id"]
    claims: dict[tuple, dict[str, int]] = defaultdict(dict)
    for c in commits:
        if c["topic"] != topic or c["kind"] not in ("acquire", "revoke"):
            continue
        tp, member, gen = (c["topic"], c["partition"]), c["member_id"], c["generation"]
        holders = claims[tp]
        if c["kind"] == "acquire":
            for other, other_gen in holders.items():
                if other == member:
                    continue
                # A claim lapses once its holder is left out of a later generation (it was fenced).
                held = all(other in members_of.get(x, set()) for x in range(other_gen, gen + 1))
                if other_gen == gen or held:
                    out.add("two_owners", f"{group}: {tp[0]}-{tp[1]} claimed by {member} (generation {gen}) while "
                                          f"{other} held it since generation {other_gen} (version {c['_commit_version']})")
            holders[member] = gen
        else:
            holders.pop(member, None)


KAFKA_MEMBER_ID = re.compile(r"^(?P<client>.+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _client_of(member_id: str) -> str | None:
    """The client id in a member id a Kafka coordinator gave (``client.id`` and a UUID), else None."""
    m = KAFKA_MEMBER_ID.match(member_id or "")
    return m["client"] if m else None


def check_positions(group: str, topic: str, commits: list[dict], log: list[dict], out: Findings) -> None:
    """Committed positions only rise and never pass the log end. One exception, counted apart
    (``kept_position``): a Kafka client that rejoins under a new member id and commits the very
    position it committed last itself, from an earlier membership. kafka-python keeps a partition's
    fetch position across an eager rebalance when it is assigned the partition again, even after
    missing a generation in which another member moved it on; it then reads from there and commits
    it, and a broker accepts that commit as lakelog does. A coordinator that answered OffsetFetch
    with a stale position would show as ``position_backwards`` to any other value."""
    ends: dict[int, int] = defaultdict(int)
    for r in log:
        ends[r["partition"]] = max(ends[r["partition"]], r["offset"] + 1)
    last: dict[int, int] = {}
    own: dict[tuple[str, int], tuple[str, int]] = {}  # (client, partition) -> (member id, its last commit)
    for c in commits:
        if c["topic"] != topic or c["kind"] not in ("commit", "revoke") or c["offset"] < 0:
            continue
        p, client = c["partition"], _client_of(c["member_id"])
        if c["offset"] < last.get(p, -1):
            member, offset = own.get((client, p), (None, None))
            if client is not None and member not in (None, c["member_id"]) and offset == c["offset"]:
                out.stats[f"kept_position[{group}]"] += 1
            else:
                out.add("position_backwards", f"{group}: p{p} moved back from {last[p]} to {c['offset']} "
                                              f"({c['member_id']}, version {c['_commit_version']})")
        if c["offset"] > ends.get(p, 0):
            out.add("position_beyond_end", f"{group}: p{p} committed {c['offset']} past the log end {ends.get(p, 0)}")
        last[p] = max(last.get(p, -1), c["offset"])
        if client is not None:
            own[(client, p)] = (c["member_id"], c["offset"])


# -- the whole check ----------------------------------------------------------------------------


def check(root: str, topic: str, producers: dict[str, str], acked: dict[str, Iterable[int]],
          groups: dict[str, str], commit_order: bool = True, other_logs: Iterable[str] = (),
          streams: dict[str, tuple[str, str]] | None = None, read_committed: Iterable[str] = ()) -> Findings:
    """Check ``topic`` under ``root``: producers' inputs (id -> JSON Lines path), the sequences each
    producer had acknowledged, and each group's sink (group -> sink path; groups may share one).
    ``commit_order``: also the control plane's commit-order labels (once per root). ``other_logs``:
    the topic's logs at its other roots (a replicated topic), for what an earlier leader held
    below the log start (``removed_before_copied``). ``streams``: streams reading the topic with
    the ``group`` option (their group -> their Delta sink and checkpoint), judged as groups are.
    ``read_committed``: the groups (and streams) that read at that isolation level (``checker_txn``)."""
    out = Findings()
    leader = log_location(root, topic)
    log = read_log_changes(leader)
    other_logs = list(other_logs)
    retired = retired_ends(topic_history(root, topic)) if other_logs else {}
    log = as_sent(log + removed_before_copied(leader, log, other_logs, retired))
    check_log(log, read_inputs(producers), {p: set(s) for p, s in acked.items()}, out)
    removed = removed_while_live(log_location(root, topic), {r["partition"] for r in log})
    cleaned: dict[tuple[int, int], int] = {}
    txn, committed = Transactions.of(leader, log), set(read_committed)
    if compacted(root, topic, leader):  # what log cleaning removed, and why it could
        cleaned = check_compaction(log, read_current(leader), compaction_removals(leader),
                                   resizes(topic_history(root, topic)), out, txn.state)
    for group, sink in sorted(groups.items()):
        check_group(root, topic, group, sink, log, out, removed, cleaned=cleaned, txn=txn.reading(group in committed))
    for group, (sink, checkpoint) in sorted((streams or {}).items()):
        check_group(root, topic, group, sink, log, out, removed, since=stream_since(checkpoint, topic), cleaned=cleaned,
                    txn=txn.reading(group in committed))
    if commit_order:
        check_commit_order(root, out)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Check a lakelog topic with delta-rs (independent of lakelog).")
    parser.add_argument("--root", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--producer", action="append", default=[], help="ID=INPUT.jsonl (all its records acknowledged)")
    parser.add_argument("--group", action="append", default=[], help="GROUP=SINK_PATH")
    args = parser.parse_args(argv)
    producers = dict(p.split("=", 1) for p in args.producer)
    inputs = read_inputs(producers)
    found = check(args.root, args.topic, producers, {p: set(s) for p, s in inputs.items()},
                  dict(g.split("=", 1) for g in args.group))
    print(json.dumps(found.summary(), indent=2))
    return 1 if found.anomalies else 0


if __name__ == "__main__":
    os.environ.setdefault("RUST_LOG", "error")
    raise SystemExit(main())
