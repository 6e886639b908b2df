"""Deleting a topic (Kafka's ``kafka-topics --delete``; the admin flow of seed 004): mark, fence,
empty, record.

1. record DELETING (the compare-and-set of every topic change): from here producers, consumers
   and ``alter`` that look the topic up are refused with "topic was deleted";
2. fence the log: the DELETING record applied to the log's properties (``lakelog.topic.deleted``)
   in one metadata commit, which fails every concurrent append; appends and reads check it in
   their own transaction or snapshot, so none lands or is delivered after it;
3. empty the log: delete every row, then VACUUM with no retention, so the files are gone;
4. tell the groups: one ``topic_deleted`` row in ``offset_commits``: no group's earlier
   position (nor a sink's) counts for a topic created again with the name;
5. record DELETED.

Each step is idempotent and the latest record says which step is next, so a deletion killed
anywhere is finished by running ``topics delete`` again or ``controller tick``. The history
(every record, Delta's history of the emptied table) stays.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from control_plane.controller.apply import ATTEMPTS, TopicChanges
from control_plane.controller.rules import plan_delete
from control_plane.group.offsets import GroupOffsets
from control_plane.records import TopicEvent, TopicRecord, utcnow
from control_plane.replication.state import log_path
from log_store.crash import crash_point
from log_store.log_files import purge
from log_store.table_create import table_exists
from log_store.errors import ConcurrentTopicChangeError, UnknownTopicError


def latest_record(changes: TopicChanges, topic: str) -> TopicRecord:
    """The latest record, deleted or not (UnknownTopicError if the topic never existed)."""
    record = changes.admin.image(topic).latest
    if record is None:
        changes.admin.get(topic)  # raises UnknownTopicError with the usual advice
    return record


def delete_topic(spark: SparkSession, root: str, changes: TopicChanges, topic: str) -> TopicRecord:
    """Run (or finish) the deletion of ``topic``; return its DELETED record."""
    for _ in range(ATTEMPTS):
        record = latest_record(changes, topic)
        if record.event is TopicEvent.DELETED:
            raise UnknownTopicError(f"topic '{topic}' was already deleted; `lakelog topics list` shows the topics")
        if record.event is not TopicEvent.DELETING:
            record = plan_delete(record, TopicEvent.DELETING, utcnow())
            crash_point("delete:before_record")
            if not changes.record(record):
                continue  # another controller changed the topic first: look again
            crash_point("delete:after_mark")
        return finish_deletion(spark, root, changes, record)
    raise ConcurrentTopicChangeError(f"'{topic}' kept changing while deleting it; run `lakelog topics delete` again")


def finish_deletion(spark: SparkSession, root: str, changes: TopicChanges, deleting: TopicRecord) -> TopicRecord:
    """Steps 2-5 for a topic whose latest record is ``deleting`` (each a no-op once done)."""
    changes.apply(deleting.topic, deleting)  # the fence: conditional on the log's topic version
    crash_point("delete:after_fence")
    empty_log(spark, deleting.location)
    state = changes.admin.replica_state(deleting.topic)
    for root in state.replicas if state else []:  # a replicated topic's followers go too
        path = log_path(state, root)
        if path != deleting.location and table_exists(spark, path):
            empty_log(spark, path)
    crash_point("delete:after_purge")
    GroupOffsets(spark, root).topic_deleted(deleting.topic, deleting.topic_version)
    done = plan_delete(deleting, TopicEvent.DELETED, utcnow())
    if not changes.record(done):
        winner = changes.admin.image(deleting.topic).record(done.topic_version)
        if winner is None or winner.event is not TopicEvent.DELETED:
            raise ConcurrentTopicChangeError(f"'{deleting.topic}' changed while deleting it; run `lakelog topics delete` again")
        done = winner
    crash_point("delete:after_record")
    return done


def empty_log(spark: SparkSession, location: str) -> None:
    """Delete every row of a fenced log and remove its files at once (``log_files.purge``):
    nothing may read a deleted topic, and a consumer that tries is told so."""
    purge(spark, location)
