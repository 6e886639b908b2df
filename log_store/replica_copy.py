"""Copying a topic's log from its leader root to a follower root, record for record (replication).

A follower's log is a prefix of its leader's: the same records at the same offsets, with the same
leader epoch, key, value, headers, timestamp, producer id and sequence. One copy reads the leader
at one Delta version and commits to the follower, in one commit, every record past the follower's
log ends up to the leader's at that version, with the leader's metadata (counts, epochs, modes),
log ends, log starts and producer marks as of that version. A leader commit is atomic across its
partitions, so the follower is always the leader as it was at some version: a producer's retry
at a follower that becomes leader is deduplicated by marks that match its records exactly.

The copy is idempotent and resumable: it depends on the follower's log ends in its own commit, so
two copies racing make one retry (and find nothing left), and a copy killed before its commit left
only unreferenced files. Truncation comes first when the follower holds records the leader's
history does not (a returning old leader): they are deleted above the point the control plane
gives (Kafka's leader-epoch rule), and the copy's commit then sets the follower's log ends.
"""

from __future__ import annotations

from collections.abc import Mapping

from delta.tables import DeltaTable
from pydantic import BaseModel
from pyspark.sql import SparkSession

from log_store import rs_reader
from log_store.crash import crash_point
from log_store.dense_offsets import use_one_task
from log_store.engine import DeltaTransaction, commit_user_metadata
from log_store.delta_errors import retry_on_conflict
from log_store.errors import FencedLeaderEpochError, OffsetCheckError, ReplicationError, StorageError
from log_store.files import reads_with_delta_rs
from log_store.log_metadata import (
    ARRIVAL,
    FOLLOWER,
    LAYOUT_PROP,
    LEADER,
    REPLICA_EPOCH_PROP,
    REPLICA_ROLE_PROP,
    TopicLogMetadata,
    log_end,
)
from log_store.names import LOG_END_PREFIX, LOG_START_PREFIX, PRODUCER_PREFIX, commit_metadata, log_end_app_id
from log_store.read_ranges import range_filter
from log_store.topic_log import RECORD_SCHEMA

# What a follower takes from its leader's properties and application versions: the log's own
# state, not the root's role in it or how its files are laid out.
TRUNCATE = "truncate"  # the commit metadata's kind of a truncation's DELETE (docs/storage-format.md)
_OWN_PROPS = (REPLICA_ROLE_PROP, REPLICA_EPOCH_PROP, LAYOUT_PROP)
_COPIED_APPS = (LOG_END_PREFIX, LOG_START_PREFIX, PRODUCER_PREFIX)


class CopyResult(BaseModel):
    """One copy: the leader version read, the follower's commit (None: it was up to date), what
    was copied and truncated per partition, and the follower's log ends after it."""

    source_version: int
    version: int | None
    copied: dict[int, int]
    truncated: dict[int, int] = {}
    log_ends: dict[int, int]

    @property
    def records(self) -> int:
        return sum(self.copied.values())


def _open(spark: SparkSession, path: str) -> DeltaTransaction:
    """A transaction on the log at ``path``; StorageError if there is none (a root lost or not
    mounted): Delta would otherwise start a new table there."""
    txn = DeltaTransaction.start(spark, path)
    if txn.read_version < 0:
        raise StorageError(f"no topic log at {path}: the root is lost, not mounted, or was never a replica")
    return txn


def replica_role(spark: SparkSession, path: str) -> tuple[str, int]:
    """(role, leader epoch) of the log at ``path`` (an unreplicated log leads at epoch 0)."""
    conf = _open(spark, path).configuration()
    return conf.get(REPLICA_ROLE_PROP, LEADER), int(conf.get(REPLICA_EPOCH_PROP, "0"))


def set_replica_role(spark: SparkSession, path: str, role: str, epoch: int) -> bool:
    """Make the log at ``path`` the topic's ``role`` at leader ``epoch``, in one metadata commit that
    conflicts with every append in flight (the fence). False if it already was; never lowers the epoch."""

    def attempt() -> bool:
        txn = _open(spark, path)
        conf = txn.configuration()
        now = int(conf.get(REPLICA_EPOCH_PROP, "0"))
        if now > epoch or (now == epoch and conf.get(REPLICA_ROLE_PROP) == role):
            return False
        txn.commit_properties({REPLICA_ROLE_PROP: role, REPLICA_EPOCH_PROP: str(epoch)})
        return True

    return retry_on_conflict(attempt, attempts=20)


def log_ends_of(spark: SparkSession, path: str) -> dict[int, int]:
    txn = _open(spark, path)
    meta = TopicLogMetadata.from_properties(txn.configuration())
    known = txn.snapshot_app_versions()
    return {p: log_end(known, p, pm.start_offset) for p, pm in meta.partitions.items()}


def truncate(spark: SparkSession, path: str, points: Mapping[int, int]) -> dict[int, int]:
    """Delete the follower's records at and above ``points`` ({partition: offset}) where it holds
    any, then lower its log ends to the points; return the partitions truncated and their points.
    Two commits (Delta's DELETE, then the log ends): a truncation killed between them is finished by
    the next, which finds the log ends still above the points."""
    ends = log_ends_of(spark, path)
    doomed = {p: o for p, o in points.items() if ends.get(p, 0) > o}
    if doomed:
        cond = " OR ".join(f"(`partition` = {int(p)} AND `offset` >= {int(o)})" for p, o in sorted(doomed.items()))
        # The DELETE's commit says it is a truncation: readers of the change feed (the audit, the
        # campaign's checker) take its deleted rows out of what the log holds, unlike a purge's.
        with commit_user_metadata(spark, commit_metadata(TRUNCATE, points={str(p): o for p, o in sorted(doomed.items())})):
            DeltaTable.forPath(spark, path).delete(cond)
        crash_point("replicate:after_truncate")

        def lower() -> None:
            txn = _open(spark, path)
            for p in doomed:
                txn.app_version(log_end_app_id(p))
            txn.commit({log_end_app_id(p): o for p, o in doomed.items()},
                       commit_metadata(TRUNCATE, points={str(p): o for p, o in sorted(doomed.items())}))

        retry_on_conflict(lower, attempts=20)
    return doomed


def _write_copy(spark: SparkSession, txn: DeltaTransaction, source: str, version: int,
                ranges: dict[int, tuple[int, int]], target: str) -> list:
    """Write the source's records in ``ranges`` (as of ``version``) into ``txn``'s table. A small
    copy (an ``acks: all`` produce's) is read with delta-rs where it can be and written by pyarrow
    from the driver, as a small produce is: Spark's read at a version and its write job cost about
    1.2 s for 100 records."""
    columns = [f.name for f in RECORD_SCHEMA.fields]
    if use_one_task(sum(b - a for a, b in ranges.values())):
        if reads_with_delta_rs(source):
            rows = rs_reader.log_ranges(source, version, ranges, columns)
        else:
            rows = (spark.read.format("delta").option("versionAsOf", version).load(source)
                    .where(range_filter(ranges)).select(*columns).toArrow())
        return txn.write_rows(rows, partition_by="partition")
    rows = (spark.read.format("delta").option("versionAsOf", version).load(source)
            .where(range_filter(ranges)).select(*columns))
    return txn.write(rows)


def copy_log(spark: SparkSession, source: str, target: str, epoch: int,
             truncate_at: Mapping[int, int] | None = None) -> CopyResult:
    """Bring the follower log at ``target`` up to the leader log at ``source`` (see the module),
    stamping it with leader ``epoch``; ``truncate_at``: where the follower's own history diverges."""
    truncated = truncate(spark, target, truncate_at) if truncate_at else {}
    src = _open(spark, source)
    sconf = src.configuration()
    if int(sconf.get(REPLICA_EPOCH_PROP, "0")) != epoch:
        raise FencedLeaderEpochError(f"a copy stamped with leader epoch {epoch} read {source} at epoch "
                                     f"{sconf.get(REPLICA_EPOCH_PROP, '0')}: a stale request, ignored")
    if sconf.get(LAYOUT_PROP) == ARRIVAL:
        raise ReplicationError(f"the log at {source} has the arrival layout, which replication does not copy yet; "
                               "move it with `lakelog topics alter --layout partitioned`")
    smeta = TopicLogMetadata.from_properties(sconf)
    sknown = src.snapshot_app_versions()
    s_ends = {p: log_end(sknown, p, pm.start_offset) for p, pm in smeta.partitions.items()}

    def attempt() -> CopyResult:
        txn = _open(spark, target)
        tconf = txn.configuration()
        if int(tconf.get(REPLICA_EPOCH_PROP, "0")) > epoch:  # the seed's stateChangeListener
            raise FencedLeaderEpochError(f"the follower at {target} holds leader epoch {tconf[REPLICA_EPOCH_PROP]}: "
                                         f"a copy stamped with epoch {epoch} is a stale request, ignored")
        if tconf.get(REPLICA_ROLE_PROP, LEADER) == LEADER:
            raise ReplicationError(f"the log at {target} leads its topic (or is not a replica): a copy never "
                                   "overwrites a leader; elect another root first")
        tknown = txn.snapshot_app_versions()
        tmeta = TopicLogMetadata.from_properties(tconf)
        t_ends = {p: log_end(tknown, p, tmeta.partitions[p].start_offset if p in tmeta.partitions
                             else smeta.partitions[p].start_offset) for p in smeta.partitions}
        ahead = {p: (t_ends[p], s_ends[p]) for p in s_ends if t_ends[p] > s_ends[p]}
        if ahead:
            raise ReplicationError(
                f"the follower at {target} holds records past its leader's log end {ahead} (partition: "
                "(follower, leader)) that no truncation point covers; nothing was copied")
        # Records below the leader's log start are gone there: the follower starts at it instead.
        firsts = {p: max(t_ends[p], sknown.get(f"{LOG_START_PREFIX}{p}", 0)) for p in s_ends}
        ranges = {p: (firsts[p], s_ends[p]) for p in s_ends if s_ends[p] > firsts[p]}
        apps = {k: v for k, v in sknown.items() if k.startswith(_COPIED_APPS)}
        # A producer mark the leader's history does not have (written by a truncated leader) goes.
        apps |= {k: -1 for k in tknown if k.startswith(PRODUCER_PREFIX) and k not in sknown and tknown[k] != -1}
        apps = {k: v for k, v in apps.items() if tknown.get(k) != v}
        props = {k: v for k, v in sconf.items() if k.startswith("lakelog.") and k not in _OWN_PROPS}
        props |= {REPLICA_ROLE_PROP: FOLLOWER, REPLICA_EPOCH_PROP: str(epoch)}
        drop = [k for k in tconf if k.startswith("lakelog.") and k not in props and k not in _OWN_PROPS]
        changed = {k: v for k, v in props.items() if tconf.get(k) != v}
        if not ranges and not apps and not changed and not drop:
            return CopyResult(source_version=src.read_version, version=None, copied={}, truncated=truncated,
                              log_ends=t_ends)
        for p in s_ends:  # a racing copy of the same follower makes this commit retry
            txn.app_version(log_end_app_id(p))
        copied: dict[int, int] = {}
        if ranges:
            for f in _write_copy(spark, txn, source, src.read_version, ranges, target):
                if f.num_records:
                    p = int(f.partition_values["partition"])
                    copied[p] = copied.get(p, 0) + f.num_records
        wanted = {p: b - a for p, (a, b) in ranges.items()}
        if copied != wanted:
            raise OffsetCheckError(f"copying {source} to {target} read {copied} records per partition where the "
                                   f"leader's log ends say {wanted}; nothing was committed")
        crash_point("replicate:after_write")
        if changed or drop:
            txn.set_properties(changed, drop)
        version = txn.commit(apps, commit_metadata(
            "replicate", source=source, source_version=src.read_version, leader_epoch=epoch,
            ranges={str(p): list(r) for p, r in sorted(ranges.items())}))
        return CopyResult(source_version=src.read_version, version=version, copied=copied, truncated=truncated,
                          log_ends={p: max(t_ends[p], s_ends[p]) for p in s_ends})

    return retry_on_conflict(attempt, attempts=20)
