"""The high watermark a replicated topic's leader log keeps, so that a process starting anew (a
consumer, a group member, a ``format("lakelog")`` stream, ``lakelog serve``) reads from the last one
known while an in-sync root cannot be read, instead of from nothing until it has read every root.
Kafka's leader keeps its own (the log directory's ``replication-offset-checkpoint``) and reads it
back when it restarts.

Kept as application versions of the leader's log (``log_store.names.high_watermark_app_id``): one
per partition, and the leader epoch it was kept under. Written, in a commit of its own at the
leader that changes no record, log end or table property (appends racing it go on), by whoever
establishes a high watermark: an ``acks: all`` acknowledgement (``acks``: every acknowledger of the
state read after its copies holds what it was copied) and a ``replicate`` round (``rounds``: the
state read again after its copies). Only at a log that leads at that epoch, and only upwards within
it (``rules.kept_high_watermark``). Copies take it to the followers with the leader's other
application versions, so a follower elected starts from the one its leader kept. A reader counts a
root it cannot read at least at it, as far as it is of the current history
(``rules.high_watermark``): every root that acknowledges holds that much."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pyspark.sql import SparkSession

from control_plane.replication import rules
from control_plane.replication.copy import Role, commit_values, open_log
from log_store.delta_errors import retry_on_conflict
from log_store.log_metadata import TopicLogMetadata, kept_high_watermark
from log_store.names import commit_metadata, high_watermark_app_id

_log = logging.getLogger("lakelog.replication")

KEEP = "high_watermark"  # the commit metadata's kind of a commit that keeps a high watermark


def keep(spark: SparkSession, path: str, epoch: int, hw: Mapping[int, int]) -> bool:
    """Keep ``hw``, established under leader epoch ``epoch``, at the leader log at ``path``; True if
    it rose. Nothing is written when nothing rises or the log does not lead at ``epoch`` any more
    (an election fenced it: that fence conflicts with this commit, which then finds it). A keep
    that fails (the root lost meanwhile) is not an error: the next acknowledgement or round keeps
    a later one, and readers count unread roots from whatever was kept before."""

    def attempt() -> bool:
        txn = open_log(spark, path)
        conf = txn.configuration()
        if not Role.of(conf).leads_at(epoch):
            return False
        known = txn.snapshot_app_versions()
        now = kept_high_watermark(known, TopicLogMetadata.from_properties(conf).partitions)
        raised = rules.kept_high_watermark(now["kept_high_watermark"], now["kept_epoch"], hw, epoch)
        if raised is None:
            return False
        ids = [high_watermark_app_id(None), *(high_watermark_app_id(p) for p in raised)]
        txn.depend_on(ids)  # two keeps racing: one retries, and keeps the higher
        # under a later epoch a partition's kept value may fall: set as it is (``commit_values``)
        commit_values(txn, {high_watermark_app_id(None): epoch, **{high_watermark_app_id(p): o for p, o in raised.items()}},
                      known, commit_metadata(KEEP, leader_epoch=epoch))
        return True

    try:
        return retry_on_conflict(attempt, attempts=5)
    except Exception as exc:  # best effort: the records are acknowledged (or copied) all the same
        _log.info("the high watermark of %s was not kept (%s); a later acknowledgement or round keeps one", path,
                  str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        return False
