"""What readers of a replicated topic see: the high watermark they read below, the divergence
check of their positions, and the replica report of ``describe`` and ``replicate``.

A reader (a group member, a consumer, a ``format("lakelog")`` stream, ``read_partition``, the
Kafka front door) reads the leader's log first, then the replica state, then the log ends of the
other roots that acknowledge (the in-sync set and those joining it): the high watermark is what
all of them hold of the current history (``rules.high_watermark``). Nothing above it is ever
delivered, so a clean election never takes back a delivered record. A root that cannot be read
counts with what this process last read of it (``known``), and at least with the high watermark
the leader's log keeps (``watermarks``, ``kept_of``): the high watermark holds while an in-sync
root is cut off, and stops rising until the root leaves the set (Kafka's leader never lowers its
high watermark, and keeps it across a restart); while one this process never read (``unread``)
holds it below the leader's log end, "latest" is unknown (``latest_unknown``). An unclean election can (so can a root back from an older copy,
elected again with ``--unclean``); a reader then finds its position past where that election cut
the history it read (its
position's leader epoch against the elections since, ``rules.cut_below``: Kafka's divergence
check) and says so (``LogTruncatedError``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.records import ReplicaState
from control_plane.replication import rules
from control_plane.replication.copy import LogView, Role, view
from log_store import rs_reader
from control_plane.replication.state import log_path
from log_store.errors import LogTruncatedError
from log_store.log_metadata import LogSnapshot


class FollowerStatus(BaseModel):
    root: str
    log_ends: dict[int, int] | None = None  # None: could not be read
    leader_epoch: int | None = None  # the epoch whose history it holds
    copied: int = 0
    truncated: dict[int, int] = {}
    lag: int | None = None
    in_sync: bool = False
    joining: bool = False
    error: str | None = None


class ReplicaReport(BaseModel):
    """A replicated topic's replicas as seen now (``describe``) or after a round (``replicate``)."""

    topic: str
    replica_version: int
    leader: str
    leader_epoch: int
    replicas: list[str]
    in_sync: list[str]
    joining: list[str] = []
    leader_log_ends: dict[int, int]
    high_watermark: dict[int, int]
    followers: list[FollowerStatus]
    leader_error: str | None = None  # the leader's log could not be read (its root is lost)
    leader_fenced: bool = False  # the leader's log does not lead at the leader epoch (see ``leader_told``)
    # the latest leader epoch the leader's log was told of: above the leader epoch, an election
    # fenced it and recorded nothing; equal, an election recorded and not finished; below, its root
    # came back from an older copy
    leader_told: int | None = None
    hint: str | None = None  # what to run, when something must be run


# log path -> (log ends, data epoch) as this process last read them: what a root that cannot be
# read now is known to hold. An in-sync root's log only grows within its history (its truncation
# is ``rules.held``'s cap), so counting it with them never counts a record it lacks.
_KNOWN: dict[str, tuple[dict[int, int], int]] = {}


def known(path: str, ends: dict[int, int] | None, epoch: int | None) -> tuple[dict[int, int] | None, int | None]:
    """``ends`` and ``epoch`` of the log at ``path`` as just read (remembered), or, when it could
    not be read (``ends`` None), as this process last read them (None if never)."""
    if ends is not None:
        _KNOWN[path] = (dict(ends), epoch)
        return ends, epoch
    return _KNOWN.get(path, (None, None))


def unread(state: ReplicaState) -> list[str]:
    """The roots a high watermark of ``state`` counts (the leader aside) that this process has never
    read: counted as holding nothing, they hold the high watermark at the log start, which says
    nothing of where the log's committed end stands. A reader resolving "latest" then waits rather
    than start there (Kafka's leader answers OFFSET_NOT_AVAILABLE until it knows its high watermark)."""
    return sorted(r for r in rules.acknowledgers(state) - {state.leader} if log_path(state, r) not in _KNOWN)


def latest_unknown(unread: Collection[str], high_watermark: int, leader_end: int) -> bool:
    """Whether a partition's "latest" (its high watermark) is unknown to this process: a root the
    high watermark counts was never read here (``unread``: it counts as holding nothing) and the
    high watermark stands below the leader's log end, so the committed records may end anywhere up
    to it. A reader resolving "latest" then refuses, retriable, as Kafka's leader answers
    ListOffsets OFFSET_NOT_AVAILABLE until it knows its high watermark."""
    return bool(unread) and high_watermark < leader_end


def report(state: ReplicaState, leader_ends: dict[int, int], followers: list[FollowerStatus],
           kept: tuple[dict[int, int], int] | None = None) -> ReplicaReport:
    """``followers`` as seen now, with the high watermark readers get (``kept``: the leader log's
    kept high watermark, for a follower that cannot be read)."""
    ends: dict[str, dict[int, int] | None] = {}
    epochs: dict[str, int] = {}
    for f in followers:
        ends[f.root], epoch = known(log_path(state, f.root), f.log_ends, f.leader_epoch)
        if epoch is not None:
            epochs[f.root] = epoch
    cut_off = {f.root for f in followers if f.log_ends is None}
    return ReplicaReport(
        topic=state.topic, replica_version=state.replica_version, leader=state.leader,
        leader_epoch=state.leader_epoch, replicas=state.replicas, in_sync=state.in_sync, joining=state.joining,
        leader_log_ends=leader_ends,
        high_watermark=rules.high_watermark(state, leader_ends, ends, epochs, kept, cut_off),
        followers=[f.model_copy(update={"in_sync": f.root in state.in_sync, "joining": f.root in state.joining})
                   for f in followers])


def look(spark: SparkSession, state: ReplicaState, root: str, leader_ends: dict[int, int]) -> FollowerStatus:
    """A follower's log as it is now (an unreachable or missing one reported, not fatal)."""
    try:
        seen = view(spark, log_path(state, root))
    except Exception as exc:
        return FollowerStatus(root=root, error=short(exc))
    known(log_path(state, root), seen.log_ends, seen.data)
    return FollowerStatus(root=root, log_ends=seen.log_ends, leader_epoch=seen.data,
                          lag=rules.lag(leader_ends, seen.log_ends))


def high_watermark(spark: SparkSession, state: ReplicaState, leader_ends: dict[int, int],
                   kept: tuple[dict[int, int], int] | None = None) -> dict[int, int]:
    """Per partition, what every acknowledging root holds of the current history: ``leader_ends``
    (read before ``state``) capped by the others' log ends, read now. A root that cannot be read
    counts with what this process last read of it (``known``), and at least with ``kept``, the
    high watermark the leader's log keeps (read with ``leader_ends``; ``rules.high_watermark``)."""
    def read(path: str) -> tuple[dict[int, int], int]:
        seen = view(spark, path)
        return seen.log_ends, seen.data

    return high_watermark_with(state, leader_ends, read, kept)


def high_watermark_by_delta_rs(state: ReplicaState, leader_ends: dict[int, int], storage: rs_reader.Storage = None,
                               kept: tuple[dict[int, int], int] | None = None) -> dict[int, int]:
    """``high_watermark``, each root's log read by delta-rs (``format("lakelog")``'s planner)."""
    def read(path: str) -> tuple[dict[int, int], int]:
        snap, _id, conf = rs_reader.log_view(path, storage=storage)
        return snap.log_ends, Role.of(conf).data

    return high_watermark_with(state, leader_ends, read, kept)


def high_watermark_with(state: ReplicaState, leader_ends: dict[int, int],
                        read: Callable[[str], tuple[dict[int, int], int]],
                        kept: tuple[dict[int, int], int] | None = None) -> dict[int, int]:
    ends: dict[str, dict[int, int] | None] = {}
    epochs: dict[str, int] = {}
    cut_off: set[str] = set()
    for root in rules.acknowledgers(state) - {state.leader}:
        path = log_path(state, root)
        try:
            seen = read(path)
        except Exception:
            seen = (None, None)
            cut_off.add(root)
        ends[root], epoch = known(path, *seen)
        if epoch is not None:
            epochs[root] = epoch
    return rules.high_watermark(state, leader_ends, ends, epochs, kept, cut_off)


def kept_of(snap: "LogSnapshot | LogView") -> tuple[dict[int, int], int] | None:
    """The high watermark a leader's snapshot (or view) shows kept (``watermarks``), with the leader
    epoch it was kept under; None when none was."""
    return (snap.kept_high_watermark, snap.kept_epoch) if snap.kept_epoch >= 0 else None


def check_position(topic: str, partition: int, position: int, cut: int | None, reader: str) -> None:
    """Raise ``LogTruncatedError`` when ``reader``'s next offset ``position`` on ``partition`` lies
    past ``cut``, where the history it read was cut (``rules.cut_below``: an election took
    back records it delivered), or past the leader's log end when the epoch it read under is unknown."""
    back = rules.divergence(position, cut)
    if back is None:
        return
    raise LogTruncatedError(
        f"{reader} delivered '{topic}' partition {partition} up to offset {position - 1}, but an election "
        f"cut the log at {back}: offsets {back}..{position - 1} now hold other records or none. Nothing was skipped. "
        f"Decide what the records delivered from the lost history mean, then move the position back to {back} "
        f"(`lakelog groups reset-offsets --to-offset {back}`, or a stream's failOnDataLoss=false) to go on")


def short(exc: BaseException) -> str:
    """``exc`` in one line: for an error raised in the JVM, its Java exception's line, not py4j's
    "An error occurred while calling oNNN.execute"."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if len(text) > 1 and text[0].startswith("An error occurred while calling"):
        text = [text[1].lstrip(": ")]
    return (text[0] if text else type(exc).__name__)[:300]
