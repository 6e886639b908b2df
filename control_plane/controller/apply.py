"""Recording and applying a topic change: the record's compare-and-set, then one log metadata commit.

The ``topics`` control table holds the intent: each change is the next ``TopicRecord`` version,
inserted only if no record has that version yet, so of two racing controllers one wins. The log
table's properties are the commit point every producer and consumer obeys: the latest record is
applied to them in one conditional metadata commit (all epochs, the count and the modes at once).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from control_plane.controller.rules import log_metadata
from control_plane.records import TopicRecord
from control_plane.topics import TopicAdmin
from log_store import commits
from log_store.crash import crash_point
from log_store.engine import DeltaTransaction
from log_store.rs_engine import RsTransaction
from log_store.delta_errors import retry_on_conflict
from log_store.errors import ConcurrentCommitError, ConcurrentTopicChangeError
from log_store.names import log_end_app_id
from log_store.log_metadata import TOPIC_VERSION_PROP, Mode, end_offset_prop, epoch_ends_prop, epoch_raised, log_end

ATTEMPTS = 10


class TopicChanges:
    """Records topic changes (compare-and-set on the topic's version) and applies them to logs."""

    def __init__(self, spark: SparkSession, admin: TopicAdmin) -> None:
        self.spark = spark
        self.admin = admin

    def latest(self, topic: str) -> TopicRecord:
        return self.admin.get(topic)  # UnknownTopicError names the topic and how to create it

    def record(self, target: TopicRecord) -> bool:
        """The compare-and-set: True if ``target`` became the next version, False if another did."""
        return self.admin.record(target, ATTEMPTS)

    def apply(self, topic: str, record: TopicRecord | None = None) -> tuple[TopicRecord, bool]:
        """Set the log's metadata from ``record`` (default: the latest) in one commit, unless applied.

        The commit carries the record's version and is made only if the log's snapshot holds an
        older one; it fails if the metadata changes after that snapshot. So a slow controller
        can never roll the log back to an older record: a newer one applied before our snapshot
        is seen, one applied after it fails our commit (and the retry sees it).

        The same commit fixes each newly marked partition's final log end (``end_offset``), and
        records each partition's log end as its epoch rises (``epoch_raised``: the gates'
        thresholds): it depends on those partitions' log ends, so an append that lands first
        makes it retry, and no append can land after it. New partition numbers get their log end 0.
        """
        record = record or self.latest(topic)

        def attempt() -> bool:
            txn = commits.start(self.spark, record.location, f"the log of '{topic}'")
            change = metadata_change(txn, txn.configuration(), record)
            if change is None:
                return False
            crash_point("alter:before_apply_commit")  # an append landing here must make this commit retry
            txn.commit_properties(*change)
            return True

        try:
            return record, retry_on_conflict(attempt, ATTEMPTS)
        except ConcurrentCommitError:
            raise ConcurrentTopicChangeError(f"the log of '{topic}' kept changing under the controller; run it again") from None


def metadata_change(txn: "DeltaTransaction | RsTransaction", conf: dict[str, str], record: TopicRecord
                    ) -> tuple[dict[str, str], list[str], dict[str, int]] | None:
    """What applying ``record`` to the log of ``txn`` (properties ``conf``) sets, drops and
    starts (new partitions' log ends), or None if the log holds it or a newer one already. Each
    newly marked partition's final log end, and each raised partition's, is read in ``txn`` and
    depended on (see ``apply``)."""
    # A log never touched by the controller is as ``topics create`` made it: version 1.
    if int(conf.get(TOPIC_VERSION_PROP, "1")) >= record.topic_version:
        return None
    wanted = log_metadata(record)
    known = txn.snapshot_app_versions()
    props = {**wanted.to_properties(), TOPIC_VERSION_PROP: str(record.topic_version)}
    drop = []
    for p, pm in wanted.partitions.items():
        key = end_offset_prop(p)
        if pm.mode is Mode.READ_WRITE:
            drop += [key] if key in conf else []
        elif key in conf:
            props[key] = conf[key]
        else:
            txn.app_version(log_end_app_id(p))
            props[key] = str(log_end(known, p, pm.start_offset))
    raised = epoch_raised(conf, wanted, known)
    txn.depend_on(log_end_app_id(p) for p in wanted.partitions if epoch_ends_prop(p) in raised)
    props |= raised
    new_ends = {log_end_app_id(p): pm.start_offset for p, pm in wanted.partitions.items()
                if log_end_app_id(p) not in known}
    return props, drop, new_ends
