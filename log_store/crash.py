"""Named crash points: where the fault campaign and the crash tests kill a lakelog process.

A process started with ``LAKELOG_CRASH_AT=step`` (or ``step@n`` for the n-th time it gets
there, or several, comma-separated) dies with ``os._exit(86)`` at that step, as a process killed
by the operating system would: no ``finally``, no commit, nothing flushed. Every step that can
leave work half done has a name here, so ``chaos`` can enumerate them all. Never set this
variable in production.

A process started with ``LAKELOG_PAUSE_AT=step@n`` and ``LAKELOG_PAUSE_DIR=dir`` instead waits
at that step: it creates ``dir/step@n.reached`` and goes on once ``dir/step@n.go`` exists. Tests
use it to let another process commit at an exact point of this one's work (a resize landing
inside a producer's transaction), rather than hoping the timing overlaps.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CRASH_ENV = "LAKELOG_CRASH_AT"
CRASH_EXIT_CODE = 86
PAUSE_ENV = "LAKELOG_PAUSE_AT"
PAUSE_DIR_ENV = "LAKELOG_PAUSE_DIR"

POINTS: dict[str, str] = {
    "create:after_log_table": "topic create: the log table exists, the topic's record does not",
    "produce:after_write": "producer: a batch's files are written, not committed",
    "produce:after_commit": "producer: a batch is committed, the producer has not heard back",
    "spark_sink:after_topic": "format('lakelog') write: one topic's share is in the log, the next topic's not yet",
    "spark_sink:after_produce": "format('lakelog') stream write: a micro-batch is in the log, Spark has not recorded it",
    "consume:after_sink_commit": "consumer: a batch is in the sink, the group's positions are not committed",
    "consume:after_offset_commit": "consumer: a batch and its positions are committed",
    "group:after_revoke": "group member: it committed and gave up its partitions, it has not joined",
    "group:after_propose": "group leader: the generation is written, the fence is not raised",
    "group:after_acquire": "group member: it claimed its partitions, it has not started delivering",
    "alter:before_record": "controller alter: planned, nothing recorded",
    "alter:after_record": "controller alter: the change is recorded, not applied to the log",
    "alter:before_apply_commit": "controller alter: the log's metadata and marked partitions' ends read, not committed",
    "alter:after_apply": "controller alter: recorded and applied",
    "retire:before_record": "controller tick: retirement planned, nothing recorded",
    "retire:after_record": "controller tick: retirement recorded, not applied to the log",
    "retire:after_apply": "controller tick: retirement applied, rows not deleted",
    "retire:after_purge": "controller tick: the retired partitions' rows are deleted",
    "delete:before_record": "topics delete: planned, nothing recorded",
    "delete:after_mark": "topics delete: DELETING recorded, the log not fenced",
    "delete:after_fence": "topics delete: the log fenced, its records still there",
    "delete:after_purge": "topics delete: the log emptied, the groups not told",
    "delete:after_record": "topics delete: DELETED recorded",
    "retention:before_commit": "retention or delete-records: files chosen, the log start not raised",
    "retention:after_commit": "retention or delete-records: the log start raised, the control plane not told",
    "compact:before_commit": "compaction: merged files written, not committed",
    "compaction:before_commit": "key compaction: survivors written, old files and cleaned offsets not committed",
    "compaction:after_commit": "key compaction: committed, key_compactions not told",
    "replicate:after_read": "replicate: the leader's and a follower's log ends read, nothing copied or committed",
    "replicate:after_write": "replicate: a follower's copied files written, not committed",
    "replicate:after_truncate": "replicate or elect: a truncation's kept records rewritten, not committed",
    "layout:before_commit": "topics alter --layout: the log's files rewritten in the new layout, not committed",
    "elect:after_fence": "leader election: the old leader's log fenced, the new epoch not recorded",
    "txn:after_add_partitions": "transactional producer: partitions added to the transaction, nothing appended",
    "txn:after_append": "transactional producer: records appended in the transaction, not ended",
    "txn:after_decision": "transaction end: Prepare* recorded, no marker written",
    "txn:after_topic_markers": "transaction end: one topic's markers written, the next topic's not yet",
    "txn:after_positions": "transaction end: markers and the group's positions written, Complete* not recorded",
    "elect:after_record": "leader election: the new epoch recorded, not finished (the topic's record, the new leader's commit)",
}

_hits: dict[str, int] = {}
_pause_hits: dict[str, int] = {}


def _wanted(spec: str, step: str) -> int | None:
    """The hit number at which ``step`` should crash according to ``spec``, or None."""
    for part in spec.split(","):
        name, _, nth = part.strip().partition("@")
        if name == step:
            return int(nth or 1)
    return None


def crash_point(step: str) -> None:
    """Die here if ``$LAKELOG_CRASH_AT`` names ``step`` (and this is the chosen hit)."""
    if step not in POINTS:
        raise KeyError(f"unregistered crash point {step!r}; add it to log_store.crash.POINTS")
    _pause(step)
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    nth = _wanted(spec, step)
    if nth is None:
        return
    _hits[step] = _hits.get(step, 0) + 1
    if _hits[step] == nth:
        os._exit(CRASH_EXIT_CODE)


def _pause(step: str) -> None:
    """Wait here if ``$LAKELOG_PAUSE_AT`` names ``step`` at this hit (see the module's docstring)."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    _pause_hits[step] = _pause_hits.get(step, 0) + 1
    hits = [int(nth or 1) for name, _, nth in (p.strip().partition("@") for p in spec.split(",")) if name == step]
    if _pause_hits[step] not in hits:
        return
    folder = Path(os.environ[PAUSE_DIR_ENV])
    name = f"{step}@{_pause_hits[step]}"
    (folder / f"{name}.reached").touch()
    while not (folder / f"{name}.go").exists():
        time.sleep(0.05)
