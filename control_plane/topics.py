"""Topic administration: create, list, describe (Kafka's ``kafka-topics``).

Creating a topic makes its log table (initial metadata in the table's properties) and then
records version 1 of the topic in the ``topics`` control table with a compare-and-set
(``TopicAdmin.record``), so two racing creators cannot both win. A crash between the two steps is completed by re-running.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.image import TopicImage
from control_plane.layout import RootLayout
from control_plane.records import MAX_PARTITIONS, PartitionState, ReplicaState, TopicEvent, TopicRecord
from control_plane.replication.rules import check_roots, initial_state
from control_plane.replication.state import ReplicaStore, latest_states, located
from control_plane.tables import TABLES, TOPIC_VERSIONS_KEPT, ControlTables, counted
from control_plane.topic_config import TopicConfig, latest_config
from log_store.errors import (
    ConcurrentCommitError,
    ConcurrentTopicChangeError,
    InvalidConfigurationError,
    ReplicationError,
    StorageError,
    TopicDeletedError,
    TopicExistsError,
    UnknownTopicError,
)
from log_store import commits
from log_store.crash import crash_point
from log_store.engine import DeltaTransaction, table_version
from log_store.rs_engine import RsTransaction
from log_store.delta_errors import retry_on_conflict
from log_store.frames import arrow_rows
from log_store.names import check_topic_name, commit_metadata, topic_version_property
from log_store.log_metadata import (
    FOLLOWER, LEADER, PARTITIONED, REPLICA_EPOCH_PROP, REPLICA_ROLE_PROP, TOPIC_ID_PROP, LogSnapshot, Mode,
    TopicLogMetadata,
)
from log_store.table_create import table_exists
from log_store.topic_log import DEFAULT_LAYOUT, TopicLog



class PartitionDescription(BaseModel):
    partition: int
    location: str
    leader_epoch: int
    mode: Mode
    earliest_offset: int
    latest_offset: int
    marked_for_deletion_at: datetime | None = None  # set while marked (ReadOnly) and after retirement
    retired_at: datetime | None = None  # mode None: out of the assignment, rows deleted


class TopicDescription(BaseModel):
    topic: str
    topic_id: str  # the log table's Delta id: a topic created again with the name has a new one (Kafka's topic id)
    location: str
    partition_count: int
    undeleted_partition_count: int
    topic_version: int
    partitions: list[PartitionDescription]
    config: dict[str, str] = {}  # every topic config (control_plane.topic_config), defaults included
    layout: str = PARTITIONED  # the log's files: a folder per partition, or arrival files (docs/design.md)


def live_record(found: TopicRecord | None, topic: str, root: str) -> TopicRecord:
    """``found`` (a topic's latest record) if the topic is live; otherwise the error that says why not."""
    if found is None:
        raise UnknownTopicError(
            f"unknown topic '{topic}' under {root}; create it with `lakelog topics create --topic {topic} --partitions N`")
    if found.event is TopicEvent.DELETING:
        raise TopicDeletedError(f"topic '{topic}' is being deleted; `lakelog topics delete --topic {topic}` "
                                "(or `lakelog controller tick`) finishes it")
    if found.event is TopicEvent.DELETED:
        raise TopicDeletedError(f"topic '{topic}' was deleted; create it again with "
                                f"`lakelog topics create --topic {topic} --partitions N` (a new topic)")
    return found


def describe_topic(record: TopicRecord, snap: LogSnapshot, topic_id: str, config_rows: list[dict]) -> TopicDescription:
    """``topics describe`` from the latest record and one snapshot of the log (whoever read them:
    Spark here, delta-rs in ``control_plane.fast_reads``)."""
    meta = snap.metadata
    earliest = snap.earliest_offsets()
    states = {p.partition: p for p in record.partitions}
    return TopicDescription(
        topic=record.topic,
        topic_id=topic_id,
        location=record.location,
        # the assignment: undeleted and marked partitions, not retired ones (rule 7)
        partition_count=sum(pm.mode is not Mode.NONE for pm in meta.partitions.values()),
        undeleted_partition_count=meta.undeleted_partition_count,
        topic_version=record.topic_version,
        layout=snap.layout,
        config=TopicConfig.of(latest_config(config_rows, record.location)[1]).as_kafka(),
        partitions=[
            PartitionDescription(
                partition=p,
                # an arrival log's partitions share its files: no folder of their own
                location=f"{record.location}/partition={p}" if snap.layout == PARTITIONED else record.location,
                leader_epoch=pm.leader_epoch,
                mode=pm.mode,
                earliest_offset=earliest.get(p, 0),
                latest_offset=snap.log_ends.get(p, 0),
                marked_for_deletion_at=states[p].marked_for_deletion_at if p in states else None,
                retired_at=states[p].retired_at if p in states else None,
            )
            for p, pm in meta.partitions.items()
        ],
    )


class TopicAdmin:
    """Topic operations over one root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.layout = RootLayout(root)
        self.tables = ControlTables(spark, self.layout)
        self._images: tuple[int, dict[str, TopicImage]] | None = None

    # -- reads -------------------------------------------------------------------------------
    def images(self) -> dict[str, TopicImage]:
        """Every topic's history, replayed (one read of the small ``topics`` table, cached per
        version of it: a listing, no Spark job, while nothing changed)."""
        version = table_version(self.spark, self.tables.path("topics"))
        if self._images is None or self._images[0] != version:
            records: dict[str, list[TopicRecord]] = {}
            for row in self.tables.rows_at("topics", version):
                record = TopicRecord.model_validate(row)
                records.setdefault(record.topic, []).append(record)
            self._images = (version, {t: TopicImage(t, rs) for t, rs in records.items()})
        return self._images[1]

    def image(self, topic: str) -> TopicImage:
        """``topic``'s history (empty if the topic has no record)."""
        return self.images().get(topic) or TopicImage(topic, [])

    def current(self) -> dict[str, TopicRecord]:
        """The latest record of every topic; a replicated topic's located at the log its replica
        state names leader (``replication.state.located``)."""
        images = self.images()
        states = latest_states(ReplicaStore(self.tables).states())
        return {t: located(img.latest, img.records[0].topic_version, states) if states else img.latest
                for t, img in images.items()}

    def latest_version(self, topic: str) -> int:
        """The version of ``topic``'s latest record (0 if it has none)."""
        return self.image(topic).version

    def get(self, topic: str) -> TopicRecord:
        """The latest record of a live topic (UnknownTopicError, or TopicDeletedError if it was deleted)."""
        return live_record(self.current().get(topic), topic, self.layout.root)

    def log(self, topic: str) -> TopicLog:
        return TopicLog.for_path(self.spark, self.get(topic).location)

    def list(self) -> list[TopicRecord]:
        """Live topics and those being deleted (their event says so), not deleted ones."""
        return sorted((r for r in self.current().values() if r.event is not TopicEvent.DELETED), key=lambda r: r.topic)

    def describe(self, topic: str) -> TopicDescription:
        record = self.get(topic)
        log = TopicLog.for_path(self.spark, record.location)
        snap = log.snapshot()
        return describe_topic(record, snap, log.table_id(), ControlTables(self.spark, self.layout).rows("topic_configs"))

    # -- create ------------------------------------------------------------------------------
    def create(self, topic: str, partitions: int, layout: str | None = None,
               replicas: list[str] | None = None) -> TopicRecord:
        """Create ``topic`` with ``partitions`` partitions (its log's ``layout``: ``TopicLog.create``);
        fails clearly if it exists. ``replicas``: roots that each keep a copy of the log, the first
        leading (docs/replication.md); the control plane stays under this root."""
        check_topic_name(topic)
        if not isinstance(partitions, int) or partitions < 1 or partitions > MAX_PARTITIONS:
            raise InvalidConfigurationError(
                f"invalid partition count {partitions}: a topic needs between 1 and {MAX_PARTITIONS} partitions"
            )
        roots = check_roots(replicas) if replicas is not None else None
        if roots and (layout or DEFAULT_LAYOUT) != PARTITIONED:
            raise ReplicationError("a replicated topic has the partitioned layout (replication does not copy the "
                                   "arrival layout yet); create it without --layout arrival")
        self.layout.check_writable()
        for root in roots or []:
            try:
                RootLayout(root).check_writable()
            except StorageError as exc:
                raise ReplicationError(f"replica root {root} cannot be used: {exc}; nothing was created") from None
        before = self.current().get(topic)
        if before is not None and before.event is TopicEvent.DELETING:
            raise TopicExistsError(f"topic '{topic}' is being deleted; finish with `lakelog topics delete --topic {topic}`, "
                                   "then create it")
        if before is not None and before.event is not TopicEvent.DELETED:
            raise TopicExistsError(f"topic '{topic}' already exists; see `lakelog topics describe --topic {topic}`")
        # Created again after a deletion: a new incarnation in a new table (the old one stays
        # fenced), its records numbered on from the old history's versions.
        version = before.topic_version + 1 if before else 1
        location = self.layout.topic(topic) + (f"~{version}" if before else "")
        wanted = TopicLogMetadata.initial(topic, partitions)
        if roots:
            location = self._create_replicas(topic, version, roots, wanted, bool(before))
        log = TopicLog.create(self.spark, location, wanted, version, layout)
        crash_point("create:after_log_table")
        found = log.metadata()
        if found.undeleted_partition_count != partitions or len(found.partitions) != partitions:
            raise TopicExistsError(
                f"a log table for '{topic}' already exists at {location} with "
                f"{len(found.partitions)} partitions; remove it or create the topic with that count"
            )
        record = TopicRecord(
            topic=topic,
            topic_version=version,
            event=TopicEvent.CREATE,
            location=location,
            partition_count=partitions,
            undeleted_partition_count=partitions,
            partitions=[PartitionState(partition=p) for p in range(partitions)],
        )
        if not self.record(record):
            raise TopicExistsError(f"topic '{topic}' was created concurrently by another process")
        return record

    def _create_replicas(self, topic: str, version: int, roots: list[str], wanted: TopicLogMetadata,
                         again: bool) -> str:
        """Make the log at every replica root (the first leads), then record the replica state,
        before the topic's record names the leader's log: a crash before the record is completed
        by creating again. Returns the leader's log location."""
        paths = [RootLayout(r).topic(topic) + (f"~{version}" if again else "") for r in roots]
        # one topic id for every root's log: the first root's, if a crashed attempt made it already
        topic_id = TopicLog(self.spark, paths[0]).table_id() if table_exists(self.spark, paths[0]) \
            else str(uuid.uuid4())
        for i, path in enumerate(paths):
            TopicLog.create(self.spark, path, wanted, version, PARTITIONED,
                            {REPLICA_ROLE_PROP: LEADER if i == 0 else FOLLOWER, REPLICA_EPOCH_PROP: "0",
                             TOPIC_ID_PROP: topic_id})
        store = ReplicaStore(self.tables)
        if not store.record(initial_state(topic, version, roots, list(wanted.partitions))):
            found = store.latest(topic, version)
            if found is None or found.replicas != roots:
                raise TopicExistsError(f"topic '{topic}' was being created with replicas "
                                       f"{', '.join(found.replicas) if found else '?'}; create it with those")
        return paths[0]

    def incarnation(self, topic: str) -> int:
        """The version of the record that created ``topic``'s current incarnation (0: none)."""
        records = self.image(topic).records
        return records[0].topic_version if records else 0

    def replica_state(self, topic: str) -> ReplicaState | None:
        """A replicated topic's latest replica state (None: not replicated)."""
        return ReplicaStore(self.tables).latest(topic, self.incarnation(topic))

    def replica_history(self, topic: str) -> list[ReplicaState]:
        """Every replica state of ``topic``'s current incarnation, oldest first."""
        return ReplicaStore(self.tables).history(topic, self.incarnation(topic))

    # -- the compare-and-set -----------------------------------------------------------------
    def record(self, target: TopicRecord, attempts: int = 10) -> bool:
        """Append ``target`` as its topic's version ``target.topic_version``: True if it became
        that version, False if another process recorded that version first.

        The compare-and-set is the application version ``lakelog.topicVersion.<topic>`` (a table
        property of that name in earlier releases: the higher of the two counts), read and raised
        in the record's own commit (as a group's generation is): of two commits raising it from one
        version one wins, and a change to another topic does not conflict. A table made before
        versions were kept (no ``lakelog.topicVersions`` marker) gets every topic's version from its
        rows at the transaction's version, as properties, in one commit through Spark's engine (it
        then conflicts with any concurrent one adding rows, as an older lakelog's MERGE would).
        """
        self.tables.ensure()
        path = self.tables.path("topics")
        prop = topic_version_property(target.topic)
        metadata = commit_metadata("topic", topic=target.topic, topic_version=target.topic_version,
                                   event=target.event.value)

        def attempt() -> bool:
            txn = commits.start(self.spark, path, "the control table topics")
            conf = txn.configuration()
            if not conf.get(TOPIC_VERSIONS_KEPT):
                txn.release()
                return self._record_in_properties(path, prop, target, metadata)
            if counted(txn, prop) >= target.topic_version:
                txn.release()
                return False
            txn.write_rows(arrow_rows(self.spark, [target.row()], TABLES["topics"]))
            txn.commit({prop: target.topic_version}, metadata)
            return True

        try:
            return retry_on_conflict(attempt, attempts)
        except ConcurrentCommitError:
            raise ConcurrentTopicChangeError(f"could not record the change to '{target.topic}' against concurrent "
                                             "changes to other topics; run it again") from None

    def _record_in_properties(self, path: str, prop: str, target: TopicRecord, metadata: str) -> bool:
        """``record`` on a table made before topic versions were kept: every topic's version from
        the rows, set as properties with the record (in one commit), and the marker; later records
        raise application versions."""
        txn = self.tables.rows_transaction("topics")
        versions = self._versions_in_rows(txn)
        if versions.get(prop, 0) >= target.topic_version:
            return False
        raised = {k: str(v) for k, v in versions.items()} | {prop: str(target.topic_version), TOPIC_VERSIONS_KEPT: "true"}
        txn.set_properties(raised)
        txn.write_rows(arrow_rows(self.spark, [target.row()], TABLES["topics"]))
        txn.commit({}, metadata)
        return True

    def _versions_in_rows(self, txn: "DeltaTransaction | RsTransaction") -> dict[str, int]:
        """Each topic's latest version property, from the rows of a table made before the
        properties, as of ``txn``'s version."""
        txn.read_whole_table()
        versions: dict[str, int] = {}
        for r in self.tables.rows_at("topics", txn.read_version):
            key = topic_version_property(r["topic"])
            versions[key] = max(versions.get(key, 0), int(r["topic_version"]))
        return versions
