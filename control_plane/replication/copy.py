"""A root's log as a replica: its role and epochs, and copying the leader's records to it,
truncation included, in one commit (replication's data step).

A follower's log is a prefix of its leader's: the same records at the same offsets, with the same
leader epoch, key, value, headers, timestamp, producer id and sequence. Each log records in its
table properties its **role**, its **fence epoch** (the latest leader epoch it was told of: a copy
or a finishing step stamped with an older one is a stale request and refused) and its **data
epoch** (the leader epoch whose history it holds: where it must truncate is read from it).

One copy reads the leader at one Delta version and commits to the follower, in one commit: the
follower's records past where its history diverges removed (Kafka's leader-epoch rule, the
points from the replica state's epoch starts; a file holding records on both sides rewritten
with those below), every record past the follower's log end up to the leader's (a retired
partition's none: the leader purges them, and the follower's go), the leader's
metadata (counts, epochs, modes), log ends, log starts and producer marks as of that version, and
its epochs. The commit depends on the follower's log ends and metadata: two copies racing make
one retry, which finds nothing left; a copy killed before its commit left only unreferenced
files. A leader commit is atomic across partitions, so a follower always equals its leader at
some version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.replication.rules import truncation_points
from log_store import commits, rs_reader
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.dense_offsets import use_one_task
from log_store.engine import DeltaTransaction
from log_store.rs_engine import RsTransaction
from log_store.table_create import table_exists
from log_store.errors import FencedLeaderEpochError, OffsetCheckError, ReplicationError, StorageError
from log_store.object_store import delta_rs_reads
from log_store.log_metadata import (
    ARRIVAL,
    FOLLOWER,
    LAYOUT_PROP,
    LEADER,
    REPLICA_DATA_EPOCH_PROP,
    REPLICA_EPOCH_PROP,
    REPLICA_ROLE_PROP,
    Mode,
    TopicLogMetadata,
    kept_high_watermark,
    log_end,
)
from log_store.names import (
    HIGH_WATERMARK_PREFIX, LOG_END_PREFIX, LOG_START_PREFIX, PRODUCER_PREFIX, STREAM_BATCH_PREFIX, commit_metadata,
    log_end_app_id, producer_app_id, stream_batch_app_id,
)
from log_store.read_ranges import range_filter
from log_store.topic_log import RECORD_SCHEMA, TopicLog
from log_store.txn_markers import ensure_control_column, has_control_column
from log_store.txn_marks import CONTROL_COLUMN, TXN_EPOCH_PREFIX, TXN_MARK_PREFIX

TRUNCATE = "truncate"  # the commit metadata's kind of a commit that truncates (docs/storage-format.md)
REPLICATE = "replicate"
# What a follower takes from its leader's properties and application versions: the log's own
# state, not the root's role in it or how its files are laid out.
_OWN_PROPS = (REPLICA_ROLE_PROP, REPLICA_EPOCH_PROP, REPLICA_DATA_EPOCH_PROP, LAYOUT_PROP)
# (a stream sink's micro-batch mark too: a replay after a failover must find it at the new leader;
# and the kept high watermark: a follower elected starts from the one its leader kept, as Kafka's
# follower keeps the high watermark its leader sends it)
# (and the transactions' marks and epochs: a follower elected tells open transactions and fences
# zombies as its leader did)
_COPIED_APPS = (LOG_END_PREFIX, LOG_START_PREFIX, PRODUCER_PREFIX, STREAM_BATCH_PREFIX, HIGH_WATERMARK_PREFIX,
                TXN_MARK_PREFIX, TXN_EPOCH_PREFIX)
_MARKS = (PRODUCER_PREFIX, STREAM_BATCH_PREFIX, TXN_MARK_PREFIX, TXN_EPOCH_PREFIX)
Points = Mapping[int, int]


class Role(NamedTuple):
    """A log's part in its topic's replication (an unreplicated log leads at epoch 0)."""

    role: str
    fence: int  # the latest leader epoch it was told of
    data: int  # the leader epoch whose history it holds

    @classmethod
    def of(cls, conf: Mapping[str, str]) -> "Role":
        fence = int(conf.get(REPLICA_EPOCH_PROP, "0"))
        # a log written before the data epoch was kept apart held the fence epoch's history
        return cls(conf.get(REPLICA_ROLE_PROP, LEADER), fence, int(conf.get(REPLICA_DATA_EPOCH_PROP, str(fence))))

    def leads_at(self, epoch: int) -> bool:
        return self.role == LEADER and self.fence == epoch and self.data == epoch


class LogView(BaseModel):
    """A log as one snapshot shows it: its version, log ends, role and kept high watermark."""

    version: int
    log_ends: dict[int, int]
    role: str
    fence: int
    data: int
    kept_high_watermark: dict[int, int] = {}
    kept_epoch: int = -1


class CopyResult(BaseModel):
    """One copy: the leader version read, the follower's commit (None: it was up to date), what
    was copied and truncated per partition, and the follower's log ends and data epoch after it."""

    source_version: int
    version: int | None
    copied: dict[int, int]
    truncated: dict[int, int] = {}
    log_ends: dict[int, int]
    data_epoch: int

    @property
    def records(self) -> int:
        return sum(self.copied.values())


def open_log(spark: SparkSession, path: str) -> "DeltaTransaction | RsTransaction":
    """A transaction on the log at ``path`` (the engine ``log_store.commits`` chooses);
    StorageError if there is none (a root lost or not mounted): Delta would otherwise start a new
    table there."""
    try:
        txn = commits.start(spark, path, "the log")
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"the log at {path} cannot be read ({_first_line(exc)})") from exc
    if txn.read_version < 0:
        raise StorageError(f"no topic log at {path}: the root is lost, not mounted, or was never a replica")
    return txn


def has_log(spark: SparkSession, path: str) -> bool:
    """Whether a log is at ``path`` (its Delta log read now, not a cached view of it)."""
    return table_exists(spark, path)


def _ends(txn: DeltaTransaction, conf: Mapping[str, str]) -> dict[int, int]:
    meta = TopicLogMetadata.from_properties(conf)
    known = txn.snapshot_app_versions()
    return {p: log_end(known, p, pm.start_offset) for p, pm in meta.partitions.items()}


def view(spark: SparkSession, path: str) -> LogView:
    """The log's ends, role and kept high watermark at one version (one snapshot: a reader's high
    watermark takes a follower's ends only with the epoch whose history they are)."""
    txn = open_log(spark, path)
    conf = txn.configuration()
    role = Role.of(conf)
    meta = TopicLogMetadata.from_properties(conf)
    known = txn.snapshot_app_versions()
    return LogView(version=txn.read_version, log_ends={p: log_end(known, p, pm.start_offset)
                                                       for p, pm in meta.partitions.items()},
                   role=role.role, fence=role.fence, data=role.data, **kept_high_watermark(known, meta.partitions))


def log_ends_of(spark: SparkSession, path: str) -> dict[int, int]:
    return view(spark, path).log_ends


def replica_role(spark: SparkSession, path: str) -> Role:
    return Role.of(open_log(spark, path).configuration())


def fence(spark: SparkSession, path: str, epoch: int) -> bool:
    """Tell the log at ``path`` of leader epoch ``epoch`` and make it a follower, in one metadata
    commit that conflicts with every append and copy in flight there (the fence): no record lands
    there after it but a copy stamped with ``epoch`` or later. False if it was told of ``epoch``
    or a later one already (it is left as it is: a log that leads at ``epoch`` was elected by an
    election that got there first, and a late one must not demote it)."""

    def attempt() -> bool:
        txn = open_log(spark, path)
        conf = txn.configuration()
        role = Role.of(conf)
        if role.fence >= epoch:
            return False
        txn.commit_properties({REPLICA_ROLE_PROP: FOLLOWER, REPLICA_EPOCH_PROP: str(epoch),
                               REPLICA_DATA_EPOCH_PROP: str(role.data)})
        return True

    return retry_on_conflict(attempt, attempts=20)


def _files_from(txn: DeltaTransaction, points: Points) -> dict[int, list[dict]]:
    """The log's files holding records of a partition at or above its point, per partition."""
    out: dict[int, list[dict]] = {}
    for add in txn.files():
        p = int((add.get("partitionValues") or {}).get("partition", -1))
        if p not in points:
            continue
        stats = json.loads(add.get("stats") or "{}")
        top = stats.get("maxValues", {}).get("offset")
        if top is None:
            raise OffsetCheckError(f"{add['path']} has no offset statistics: a truncation cannot tell what it holds; "
                                   "nothing was changed")
        if int(top) >= points[p]:
            out.setdefault(p, []).append({**add, "_first": int(stats["minValues"]["offset"])})
    return out


def _files_below(txn: DeltaTransaction, ends: Points) -> list[dict]:
    """The log's files wholly below their partition's offset in ``ends`` (a retired partition's
    final end), as remove actions take them."""
    out = []
    for add in txn.files():
        p = int((add.get("partitionValues") or {}).get("partition", -1))
        if p not in ends:
            continue
        top = json.loads(add.get("stats") or "{}").get("maxValues", {}).get("offset")
        if top is None:
            raise OffsetCheckError(f"{add['path']} has no offset statistics: a copy cannot tell what it holds; "
                                   "nothing was changed")
        if int(top) < ends[p]:
            out.append(add)
    return out


def _truncate_in(spark: SparkSession, txn: DeltaTransaction, path: str, points: Points) -> None:
    """Take the records at and above ``points`` out of ``txn``'s log: files wholly above removed,
    a file across a point rewritten with the records below it (same rows, same offsets)."""
    files = _files_from(txn, points)
    keep = {p: (min(f["_first"] for f in fs), points[p]) for p, fs in files.items()
            if min(f["_first"] for f in fs) < points[p]}
    if keep:
        written = _write_ranges(spark, txn, path, txn.read_version, keep, has_control_column(txn))
        counts = _counted(written)
        wanted = {p: b - a for p, (a, b) in keep.items()}
        if counts != wanted:
            raise OffsetCheckError(f"truncating {path} kept {counts} records per partition below its points where "
                                   f"{wanted} were expected; nothing was committed")
    txn.remove([{k: v for k, v in f.items() if k != "_first"} for fs in files.values() for f in fs], data_change=True)
    crash_point("replicate:after_truncate")


def _write_ranges(spark: SparkSession, txn: DeltaTransaction, source: str, version: int,
                  ranges: dict[int, tuple[int, int]], markers: bool) -> list:
    """Write the records of ``source`` in ``ranges`` (as of ``version``) into ``txn``'s table. A
    small copy (an ``acks: all`` produce's) is read with delta-rs where it can be and written by
    pyarrow from the driver, as a small produce is: Spark's read at a version and its write job cost
    about 1.2 s for 100 records."""
    columns = [f.name for f in RECORD_SCHEMA.fields] + ([CONTROL_COLUMN] if markers else [])  # ``markers``: the source has it
    here, storage = delta_rs_reads(spark, source)
    if isinstance(txn, RsTransaction) and here:  # read with delta-rs, written by pyarrow
        return txn.write_rows(rs_reader.log_ranges(source, version, ranges, columns, storage), partition_by="partition")
    if use_one_task(sum(b - a for a, b in ranges.values())):
        if here:
            rows = rs_reader.log_ranges(source, version, ranges, columns, storage)
        else:
            rows = (spark.read.format("delta").option("versionAsOf", version).load(source)
                    .where(range_filter(ranges)).select(*columns).toArrow())
        return txn.write_rows(rows, partition_by="partition")
    rows = (spark.read.format("delta").option("versionAsOf", version).load(source)
            .where(range_filter(ranges)).select(*columns))
    return txn.write(rows)


def _counted(written: list) -> dict[int, int]:
    counts: dict[int, int] = {}
    for f in written:
        if f.num_records:
            p = int(f.partition_values["partition"])
            counts[p] = counts.get(p, 0) + f.num_records
    return counts


def _diverged(state: Any, role: Role, ends: Mapping[int, int], firsts: Mapping[int, int]) -> dict[int, int]:
    """Where a log holding ``role.data``'s history diverges from the current one: its points below
    its log ends (empty when it holds the current epoch's history, or nothing past the points).
    ``firsts``: its partitions' start offsets, where one a later epoch's start lacks truncates."""
    points = truncation_points(state, role.data, firsts) or {}
    return {p: o for p, o in points.items() if ends.get(p, 0) > o}


def copy_log(spark: SparkSession, source: str, target: str, stamp: int, state: Any) -> CopyResult:
    """Bring the follower log at ``target`` up to the log at ``source`` (see the module), as a
    request stamped with leader epoch ``stamp``: the source must have been told of exactly that
    epoch (the leader of ``stamp``, or a leader an election of ``stamp`` fenced), the follower of no
    later one, and the follower must hold no later leader's history than the source (an election
    begun before a later one raises its old leader's fence itself). ``state``: the replica state
    whose epoch starts say where the follower truncates."""
    src = open_log(spark, source)
    sconf = src.configuration()
    srole = Role.of(sconf)
    if srole.fence != stamp:
        raise FencedLeaderEpochError(f"a copy stamped with leader epoch {stamp} read {source} told of epoch "
                                     f"{srole.fence}: a stale request, ignored")
    if sconf.get(LAYOUT_PROP) == ARRIVAL:
        raise ReplicationError(f"the log at {source} has the arrival layout, which replication does not copy; "
                               "move it with `lakelog topics alter --layout partitioned`")
    smeta = TopicLogMetadata.from_properties(sconf)
    sknown = src.snapshot_app_versions()
    markers = has_control_column(src)  # the follower takes the column first (one of an earlier release)
    if markers and has_log(spark, target):
        ensure_control_column(TopicLog(spark, target))
    s_ends = {p: log_end(sknown, p, pm.start_offset) for p, pm in smeta.partitions.items()}

    # delta-rs commits table properties or files, not both: a copy that changes the follower's
    # properties (a resize, an election's epochs) with records goes through Delta's engine

    def attempt() -> CopyResult:
        txn = open_log(spark, target)
        tconf = txn.configuration()
        trole = Role.of(tconf)
        if trole.fence > stamp:  # the seed's stateChangeListener
            raise FencedLeaderEpochError(f"the log at {target} was told of leader epoch {trole.fence}: a copy "
                                         f"stamped with epoch {stamp} is a stale request, ignored")
        if trole.role == LEADER:
            raise ReplicationError(f"the log at {target} leads its topic (or is not a replica): a copy never "
                                   "overwrites a leader; elect another root first")
        if trole.data > srole.data:  # the handover of an election begun before a later one (stale)
            raise FencedLeaderEpochError(f"the log at {target} holds the history of leader epoch {trole.data}, later "
                                         f"than {source}'s ({srole.data}): a copy from an older history is a stale "
                                         "request, ignored")
        tknown = txn.snapshot_app_versions()
        tmeta = TopicLogMetadata.from_properties(tconf)
        t_ends = {p: log_end(tknown, p, tmeta.partitions[p].start_offset if p in tmeta.partitions
                             else smeta.partitions[p].start_offset) for p in smeta.partitions}
        # partitions the follower holds that its leader lacks (yet) count for the truncation too
        firsts = {p: pm.start_offset for p, pm in {**tmeta.partitions, **smeta.partitions}.items()}
        held = {p: log_end(tknown, p, pm.start_offset) for p, pm in tmeta.partitions.items()} | t_ends
        for p in held:  # a racing copy or truncation of the same follower makes this commit retry
            txn.app_version(log_end_app_id(p))
        crash_point("replicate:after_read")
        truncated = _diverged(state, trole, held, firsts)
        props = {k: v for k, v in sconf.items() if k.startswith("lakelog.") and k not in _OWN_PROPS}
        props |= {REPLICA_ROLE_PROP: FOLLOWER, REPLICA_EPOCH_PROP: str(max(trole.fence, stamp)),
                  REPLICA_DATA_EPOCH_PROP: str(srole.data)}
        drop = [k for k in tconf if k.startswith("lakelog.") and k not in props and k not in _OWN_PROPS]
        # the role as ``Role.of`` reads it (a log made without its epochs holds epoch 0's)
        effective = {**tconf, REPLICA_ROLE_PROP: trole.role, REPLICA_EPOCH_PROP: str(trole.fence),
                     REPLICA_DATA_EPOCH_PROP: str(trole.data)}
        changed = {k: v for k, v in props.items() if effective.get(k) != v}
        # A retired partition's records are no reader's and its leader purges them (a controller
        # tick): none is copied, and the follower's below its final end go too, as the leader's
        # did: in a commit that truncates nothing, so that readers of the change feed take them for
        # a purge of records appended, not a truncation's (the next copy's, when this one
        # truncates). A follower that starts empty or truncates below a purge (an old leader back
        # after an election) is owed none. Records at or past the final end are a later
        # incarnation's (the number grown again, copied by a later read of the leader than this
        # one): they stay, and the check below refuses this stale copy.
        retired = {p: pm.end_offset for p, pm in smeta.partitions.items()
                   if pm.mode is Mode.NONE and pm.end_offset is not None}
        if truncated:
            _truncate_in(spark, txn, target, truncated)
        t_ends.update({p: o for p, o in truncated.items() if p in t_ends})
        purged = _files_below(txn, retired) if retired and not truncated else []
        if purged:
            txn.remove(purged, data_change=True)
        ahead = {p: (t_ends[p], s_ends[p]) for p in s_ends if t_ends[p] > s_ends[p]}
        if ahead:
            raise ReplicationError(
                f"the log at {target} holds records past its leader's log end {ahead} (partition: "
                "(follower, leader)) that no truncation point covers; nothing was copied")
        # Records below the leader's log start are gone there, and so are a retired incarnation's
        # (a follower behind its final end when the number grew again): the follower starts at the
        # leader's log start, or at the current incarnation's start, instead.
        firsts = {p: max(t_ends[p], sknown.get(f"{LOG_START_PREFIX}{p}", 0), smeta.partitions[p].start_offset)
                  for p in s_ends}
        ranges = {p: (firsts[p], s_ends[p]) for p in s_ends if s_ends[p] > firsts[p] and p not in retired}
        apps = {k: v for k, v in sknown.items() if k.startswith(_COPIED_APPS)}
        # A producer's or a stream batch's mark the leader's history does not have (written by a
        # truncated leader) goes.
        apps |= {k: -1 for k in tknown if k.startswith(_MARKS) and k not in sknown and tknown[k] != -1}
        apps |= {log_end_app_id(p): o for p, o in truncated.items() if p not in s_ends}
        apps = {k: v for k, v in apps.items() if tknown.get(k) != v}
        if not ranges and not apps and not changed and not drop and not truncated and not purged:
            return CopyResult(source_version=src.read_version, version=None, copied={}, log_ends=t_ends,
                              data_epoch=trole.data)
        copied: dict[int, int] = {}
        if ranges:
            copied = _counted(_write_ranges(spark, txn, source, src.read_version, ranges, markers))
        wanted = {p: b - a for p, (a, b) in ranges.items()}
        if copied != wanted:
            raise OffsetCheckError(f"copying {source} to {target} read {copied} records per partition where the "
                                   f"leader's log ends say {wanted}; nothing was committed")
        crash_point("replicate:after_write")
        if changed or drop:
            txn.set_properties(changed, drop)
        meta = dict(source=source, source_version=src.read_version, leader_epoch=stamp,
                    ranges={str(p): list(r) for p, r in sorted(ranges.items())})
        if truncated:  # readers of the change feed take these deletes out of what the log appended
            meta["points"] = {str(p): o for p, o in sorted(truncated.items())}
        if purged:
            meta["purged"] = sorted({int(f["partitionValues"]["partition"]) for f in purged})
        version = commit_values(txn, apps, tknown, commit_metadata(TRUNCATE if truncated else REPLICATE, **meta))
        return CopyResult(source_version=src.read_version, version=version, copied=copied, truncated=truncated,
                          log_ends={p: max(t_ends[p], s_ends[p]) for p in s_ends}, data_epoch=srole.data)

    return retry_on_conflict(attempt, attempts=20)


def commit_values(txn: "DeltaTransaction | RsTransaction", apps: Mapping[str, int], known: Mapping[str, int],
            metadata: str) -> int:
    """Commit ``apps``: those that rise as application versions, those a truncation lowers (log
    ends, producer marks, batch stamps; a high watermark kept under a later epoch) as values set as
    they are (``counters``), which the engines never refuse for falling. The ids the caller read
    it depends on either way."""
    rising = {k: v for k, v in apps.items() if v >= known.get(k, -1)}
    return txn.commit(rising, metadata, counters={k: v for k, v in apps.items() if k not in rising})


def truncate_log(spark: SparkSession, path: str, stamp: int, state: Any) -> dict[int, int]:
    """Truncate the log at ``path`` where ``state`` says its history diverges, in one commit that
    depends on its log ends and is refused if the log was told of an epoch after ``stamp`` (an
    election whose old leader cannot be reached to copy from). Returns what it truncated."""

    def attempt() -> dict[int, int]:
        txn = open_log(spark, path)
        conf = txn.configuration()
        role = Role.of(conf)
        if role.fence > stamp or (role.role == LEADER and role.fence >= stamp):
            raise FencedLeaderEpochError(f"the log at {path} was told of leader epoch {role.fence}"
                                         f"{' and leads' if role.role == LEADER else ''}: a truncation stamped with "
                                         f"epoch {stamp} is a stale request, ignored")
        ends = _ends(txn, conf)
        meta = TopicLogMetadata.from_properties(conf)
        points = _diverged(state, role, ends, {p: pm.start_offset for p, pm in meta.partitions.items()})
        if not points:
            return {}
        for p in points:
            txn.app_version(log_end_app_id(p))
        known = txn.snapshot_app_versions()
        marks = _marks_truncated(spark, path, txn.read_version, points, known)
        _truncate_in(spark, txn, path, points)
        commit_values(txn, {**{log_end_app_id(p): o for p, o in points.items()}, **marks}, known,
                commit_metadata(TRUNCATE, points={str(p): o for p, o in sorted(points.items())}, leader_epoch=stamp))
        return points

    return retry_on_conflict(attempt, attempts=20)


def _marks_truncated(spark: SparkSession, path: str, version: int, points: Points,
                     known: Mapping[str, int]) -> dict[str, int]:
    """The marks of the producers whose records a truncation at ``points`` takes out of the log at
    ``path`` (as of ``version``), moved below the first of them, and their stream batch stamps
    dropped (Kafka truncates a partition's producer state with its log): a retry of those records,
    or the replay of their micro-batch, lands them again rather than being taken for a duplicate of
    records the log no longer holds. (A copy takes its source's marks instead.)"""
    here, storage = delta_rs_reads(spark, path)
    if here:
        firsts = rs_reader.first_sequences(path, version, points, storage)
    else:
        cond = " OR ".join(f"(partition = {p} AND offset >= {o})" for p, o in sorted(points.items()))
        firsts = (spark.read.format("delta").option("versionAsOf", version).load(path).where(cond)
                  .where(F.col("producer_id").isNotNull()).groupBy("producer_id")
                  .agg(F.min("sequence").alias("first")).collect())
    out: dict[str, int] = {}
    for row in firsts:
        if row["first"] is None:
            continue
        mark, stamp = producer_app_id(row["producer_id"]), stream_batch_app_id(row["producer_id"])
        if known.get(mark, -1) >= row["first"]:
            out[mark] = row["first"] - 1
        if known.get(stamp, -1) != -1:
            out[stamp] = -1
    return out


def _first_line(exc: BaseException) -> str:
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if len(text) > 1 and text[0].startswith("An error occurred while calling"):
        text = [text[1].lstrip(": ")]
    return (text[0] if text else type(exc).__name__)[:300]
