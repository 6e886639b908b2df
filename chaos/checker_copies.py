"""The campaign's checker of transactions (``schedule.TxnPlan``), with delta-rs only, as
``chaos.checker``: the copy topics' logs are read whole (their change feed), each record's state
told from the markers alone (``checker_txn.states`` without marks: a producer id's records in a
partition up to its next marker take that marker's commit or abort; after its last marker they
are open), never from lakelog's readers.

Anomaly classes:

- ``txn_duplicate``: an input record's copy committed twice in one copy topic (the copier's
  output per input offset, named by its ``src`` header);
- ``txn_lost``: an input record below the copier group's committed position with no committed
  copy (unless retention, delete-records or key compaction removed it while live, or its partition
  was retired before the copier's first committed read: the group's view starts there, or its
  group reported it expired);
- ``txn_phantom``: a committed copy naming no input record, or not its key and value;
- ``txn_key_reorder``: a key's committed copies out of its input partition's order;
- ``txn_aborted_read``: the read_committed group's sink holds a record of an aborted or open
  transaction, or a marker;
- ``txn_sink_duplicate`` / ``txn_undelivered``: that sink holds a record twice / lacks a committed one;
- ``txn_open``: once everything stopped and a tick ran, a partition of a copy topic with a
  transaction still open (its mark odd, or records after its producer's last marker).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable

from deltalake import DeltaTable

from chaos.checker_compaction import compaction_removals
from chaos.checker_reads import (log_location, read_changes, read_current, read_log_changes, removed_while_live,
                                 retired_before, text, topic_history)
from chaos.checker_txn import ABORTED, COMMITTED, MARKER, OPEN, states

TXN_ANOMALIES = ("txn_duplicate", "txn_lost", "txn_phantom", "txn_key_reorder", "txn_aborted_read",
                 "txn_sink_duplicate", "txn_undelivered", "txn_open")
MARK_PREFIX = "lakelog.txn.mark."  # docs/design.md: the mark of a producer id in a partition, an application version
Add = Callable[[str, str], None]


def source(row: dict) -> tuple[int, int] | None:
    """The input record a copy names (header ``src``: partition:offset)."""
    for h in row.get("headers") or []:
        if h.get("key") == "src":
            p, _, o = (text(h.get("value")) or "").partition(":")
            if p.isdigit() and o.isdigit():
                return int(p), int(o)
    return None


def check_copies(topic: str, index: int, rows: list[dict], inputs: dict[tuple[int, int], dict],
                 positions: dict[int, int], excused: Callable[[int, int], bool], add: Add) -> tuple[int, int]:
    """One copy topic (the copier's ``index``-th output) against the input; returns its committed
    copies, and the inputs below the group's position removed (retention, compaction, a retirement
    before the copier first read) uncopied."""
    fate = states(rows, markers=True)
    committed = sorted((r for r in rows if fate.get((r["partition"], r["offset"])) == COMMITTED),
                       key=lambda r: (r["partition"], r["offset"]))
    seen: Counter = Counter()
    last: dict[tuple[str, int], tuple[int, int]] = {}  # (key, input partition) -> last input offset copied
    for r in committed:
        src = source(r)
        where = f"{topic} p{r['partition']}@{r['offset']}"
        inp = inputs.get(src) if src else None
        value = text(r["value"])
        want = None if inp is None or inp["value"] is None else text(inp["value"]) + f"-{index}"
        if inp is None or text(inp["key"]) != text(r["key"]) or want != value:
            add("txn_phantom", f"{where}: committed copy {text(r['key'])}={value} names input {src}, which holds "
                               f"{None if inp is None else (text(inp['key']), text(inp['value']))}")
            continue
        seen[src] += 1
        if seen[src] > 1:  # (out of order too, as a copy made again is: the duplicate is the finding)
            add("txn_duplicate", f"{where}: copy {seen[src]} committed of input p{src[0]}@{src[1]}")
            continue
        key = (text(r["key"]), src[0])
        if key in last and last[key][1] > src[1]:
            add("txn_key_reorder", f"{where}: key {key[0]}'s copy of input p{src[0]}@{src[1]} after that of "
                                   f"p{src[0]}@{last[key][1]}")
        last[key] = max(last.get(key, src), src)
    gone = 0
    for (p, o) in sorted(inputs):
        if o < positions.get(p, 0) and not seen[(p, o)]:
            if excused(p, o):
                gone += 1
            else:
                add("txn_lost", f"{topic}: input p{p}@{o} is below the group's position {positions[p]} and was never copied")
    return len(committed), gone


def check_reader(topic: str, rows: list[dict], sink: list[dict], add: Add) -> None:
    """The read_committed group's sink of ``topic``: only committed records, each once, all of them."""
    fate = states(rows, markers=True)
    got = Counter((r["partition"], r["offset"]) for r in sink if r.get("topic", topic) == topic)
    for (p, o), n in sorted(got.items()):
        if fate.get((p, o)) != COMMITTED:
            add("txn_aborted_read", f"{topic} p{p}@{o}: a read_committed sink holds a record whose transaction is "
                                    f"{fate.get((p, o), 'not in the log')}")
        if n > 1:
            add("txn_sink_duplicate", f"{topic} p{p}@{o}: {n} times in the read_committed sink")
    for at, what in sorted(fate.items()):
        if what == COMMITTED and at not in got:
            add("txn_undelivered", f"{topic} p{at[0]}@{at[1]}: committed, never delivered to the read_committed group")


def check_open(topic: str, rows: list[dict], marks: dict[tuple[int, str], int], add: Add) -> None:
    """No transaction open once everything stopped: no odd mark, no record after its producer's last marker."""
    opened = {at for at, what in states(rows).items() if what == OPEN}
    for p in sorted({p for p, _ in opened}):
        firsts = sorted(o for q, o in opened if q == p)
        add("txn_open", f"{topic} p{p}: {len(firsts)} record(s) from offset {firsts[0]} after their producer's last marker")
    for (p, pid), mark in sorted(marks.items()):
        if mark % 2 == 1 and not any(q == p for q, _ in opened):
            add("txn_open", f"{topic} p{p}: producer {pid}'s mark says a transaction is open from offset {(mark - 1) // 2}")


def read_marks(location: str, rows: list[dict]) -> dict[tuple[int, str], int]:
    """Each (partition, producer id)'s mark in the log at ``location`` (its application version)."""
    table = DeltaTable(location)
    out = {}
    for p, pid in sorted({(r["partition"], r["producer_id"]) for r in rows if r.get("producer_id")}):
        mark = table.transaction_version(f"{MARK_PREFIX}{p}.{pid}")
        if mark is not None:
            out[(p, pid)] = int(mark)
    return out


def reported_expired(root: str, group: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """The ranges the copier's group reported expired on ``topic`` (records a retirement or a
    deletion took before it read them: reported, as the guarantee's one exception, not lost)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for c in read_changes(f"{root}/control/offset_commits"):
        if c["group"] == group and c["topic"] == topic and c["kind"] == "expired":
            out[c["partition"]].append((c["offset"], c["end_offset"]))
    return out


def group_positions(root: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed positions on ``topic`` (its last commit per partition, by commit version)."""
    out: dict[int, int] = {}
    commits = [c for c in read_changes(f"{root}/control/offset_commits")
               if c["group"] == group and c["topic"] == topic and c["offset"] >= 0 and c["kind"] in ("commit", "reset")]
    for c in sorted(commits, key=lambda c: c["_commit_version"]):
        out[c["partition"]] = c["offset"]
    return out


def copier_since(logs: Path, transactional_id: str) -> int | None:
    """The topic version the copier's first committed copy was read at (its runs' ``copied`` events,
    logs ``<transactional id>.<run>.out``): where its group's view of the topic starts, as a
    group's first generation starts a member's. None if no run committed a copy (or says no version)."""
    versions = []
    for path in logs.glob(f"{transactional_id}.*.out"):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == "copied" and event.get("topic_version") is not None:
                    versions.append(int(event["topic_version"]))
    return min(versions) if versions else None


def judge(root: str, topic: str, plan, found) -> None:
    """Check a schedule's transactions (``plan``: its ``TxnPlan``) into ``found`` (``checker.Findings``)."""
    def add(kind: str, what: str) -> None:
        found.counts.setdefault(kind, 0)
        found.add(kind, what)

    for kind in TXN_ANOMALIES:
        found.counts.setdefault(kind, 0)
    location = log_location(root, topic)
    log = read_log_changes(location)
    inputs = {(r["partition"], r["offset"]): r for r in log}
    removed = removed_while_live(location, {p for p, _ in inputs})
    cleaned = compaction_removals(location)

    def excused(p: int, o: int) -> bool:
        return (p, o) in cleaned or any(lo <= o < hi for lo, hi in removed.get(p, []))

    history = topic_history(root, topic)
    for copier in plan.copiers:
        positions = group_positions(root, copier.group, topic)
        since = copier_since(Path(root).parent / "logs", copier.transactional_id)
        # partitions retired before the copier's first committed read were never its to copy (no interest of
        # its group held their retirement back), as partitions retired before a group's first generation
        before = retired_before(history, since) if since is not None else {}
        expired = reported_expired(root, copier.group, topic)
        found.stats[f"txn_positions[{copier.group}]"] = sum(positions.values())
        for index, out_topic in enumerate(copier.outputs):
            where = log_location(root, out_topic)
            rows = read_log_changes(where)
            copies, gone = check_copies(out_topic, index, rows, inputs, positions,
                                        lambda p, o: excused(p, o) or o < before.get(p, 0)
                                        or any(lo <= o < hi for lo, hi in expired.get(p, [])), add)
            found.stats[f"txn_copies[{out_topic}]"] = copies
            found.stats[f"txn_removed_before_copied[{out_topic}]"] = gone
            fate = Counter(states(rows, markers=True).values())
            found.stats["txn_aborted_records"] += fate[ABORTED]
            found.stats["txn_markers"] += fate[MARKER]
            check_open(out_topic, rows, read_marks(where, rows), add)
            if out_topic == plan.copiers[0].outputs[0] and plan.reader:
                check_reader(out_topic, rows, read_current(f"{root}/sinks/{plan.sink}"), add)
