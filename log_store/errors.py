"""lakelog's exceptions, in one place at the bottom layer.

Every error a user can see is a ``LakelogError`` with a message that says what was wrong and
what to do. ``RetriableError`` subclasses are the ones a client handles by refreshing metadata
and trying again (Kafka's retriable errors); the rest are fatal for the request.
"""

from __future__ import annotations


class LakelogError(Exception):
    """Base class. Raised for any problem lakelog reports to its user."""


class RetriableError(LakelogError):
    """The request may succeed if retried after refreshing metadata."""


class InvalidPartitionMetadataError(RetriableError):
    """An append saw a partition count, epoch or mode that differs from the producer's view.

    Raised by the fenced append when the producer's ``undeleted_partition_count`` is stale or a
    target partition is not writable. The producer refreshes metadata, re-partitions and retries.
    ``partitions``: the partitions found not writable, where the append knows them.
    """

    def __init__(self, message: str, partitions: list[int] | None = None) -> None:
        super().__init__(message)
        self.partitions = partitions or []


class FencedLeaderEpochError(InvalidPartitionMetadataError):
    """An append (or a state change) reached a replica root that no longer leads the topic: an
    election since recorded a newer leader epoch. The producer refreshes the topic, whose location
    is now the new leader's log, and retries there; nothing was written at the fenced root."""


class LeaderNotAvailableError(RetriableError):
    """A replicated topic's leader log could not be read (its root is lost, or an election is
    moving it): the consumer waits and looks the topic up again, as Kafka's consumer does."""


def leader_unavailable(topic: str, location: str, exc: BaseException) -> LeaderNotAvailableError:
    """What a reader or writer of ``topic``'s leader log at ``location`` says when it cannot be read
    (caused by ``exc``)."""
    error = LeaderNotAvailableError(f"the leader log of '{topic}' at {location} cannot be read "
                                    f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}); "
                                    "waiting for it or an election")
    error.__cause__ = exc
    return error


class NotEnoughReplicasError(RetriableError):
    """An ``acks: all`` produce could not be acknowledged: fewer in-sync replicas than
    ``min.insync.replicas``, or an in-sync follower could not take the records."""


class ReplicationError(LakelogError):
    """A replica operation was refused: an unknown, repeated or unreachable root, an election
    outside the in-sync set without ``--unclean``, or a copy onto a root that leads."""


class StaleProducerSequenceError(RetriableError):
    """A producer continuing its stream from the sequence it last committed found the log's
    mark for its id elsewhere: another process produced under the same id since. The producer
    reads the mark again and numbers the records after it; nothing was written. ``marks``: the
    log's marks of the producers that differ, where the append read them."""

    def __init__(self, message: str, marks: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.marks = marks or {}


class ProducerFencedError(LakelogError):
    """A transactional producer's append (or a marker's) came at a producer epoch below one the
    partition has seen for its id: a zombie, or a retry of a transaction that has ended. Not
    retriable: the producer is fenced; a new instance calls InitProducerId. Nothing was written."""


class ConcurrentCommitError(RetriableError):
    """Delta's optimistic concurrency rejected a commit: another writer changed what this one
    read (a partition's log end, the table's metadata, a fence, a MERGE's rows) first. Retry
    from a fresh read."""


class AppVersionConflictError(ConcurrentCommitError):
    """Another commit moved an application version this transaction read (a partition's log
    end, a producer's mark, a sink position) first: Delta's ConcurrentTransactionException."""


class ConcurrentAppendError(ConcurrentCommitError):
    """An append to a topic's log kept losing to other appends to the same partitions."""


class SinkConflictError(ConcurrentCommitError):
    """Another member of the group already wrote a partition's records past this batch to the
    Delta sink (a former owner that was slower to let go): resume from the sink's position."""


class IllegalGenerationError(LakelogError):
    """A group member acted on an old generation; it must rejoin the group."""


class UnknownTopicError(LakelogError):
    """The topic does not exist under this root. Create it with ``lakelog topics create``."""


class TopicDeletedError(UnknownTopicError):
    """The topic was deleted (or is being deleted) while a producer or consumer used it: its log is
    fenced. A topic created again with the name is a new one; start a new producer or consumer."""


class TopicExistsError(LakelogError):
    """``topics create`` named a topic that already exists."""


class UnknownGroupError(LakelogError):
    """The consumer group has never committed under this root."""


class InvalidRecordError(LakelogError):
    """An input record is malformed (bad JSON, missing value, wrong types)."""


class InvalidConfigurationError(LakelogError):
    """A configuration file or option is invalid; the message names the key."""


class SetupError(LakelogError):
    """The environment is missing something (Java, Maven, Delta jars); the message says what to run."""


class TableConfigError(LakelogError):
    """A Delta table is configured in a way lakelog cannot write to safely (the message names the
    setting and how to change it); nothing was written."""


class OffsetCheckError(LakelogError):
    """The written files' offsets are not exactly the dense range the commit would record."""


class InputChangedError(OffsetCheckError):
    """A write read other rows than the pass that counted them (an input that is not the same each
    time it is read); nothing was committed, and the producer writes the rows again from a cache."""


INPUT_CHANGED_MARK = "LAKELOG_INPUT_CHANGED"  # in the failure of a Spark task that met rows not counted
NO_SEQUENCE_MARK = "LAKELOG_NO_SEQUENCE"  # in the failure of a Spark task that met a record with a null sequence
NULL_VALUE_MARK = "LAKELOG_NULL_VALUE"  # in the failure of a Spark task that met a null value for a NOT NULL column
NO_SEQUENCE = ("records have no sequence (a null in the 'sequence' column); give every record one, or leave the "
               "column out to number the records by their place. Nothing was written.")


class NullValueRefusedError(InvalidRecordError):
    """A record with a null value (a tombstone) sent to a log whose value column is NOT NULL."""


def null_values_refused(topic: str, path: str, sink: bool = False) -> NullValueRefusedError:
    """The error for a null value sent to a topic's log (or, ``sink``, delivered to a consumer's
    sink) made by a release of lakelog before null values, whose value column is NOT NULL: which
    table it is, and what to do."""
    table = "the sink" if sink else "the topic's log"
    fix = f"ALTER TABLE delta.`{path}` ALTER COLUMN value DROP NOT NULL"
    todo = (f"Let the sink keep null values (once, in Spark SQL): {fix}" if sink else
            f"Send an empty value instead, or let the log keep null values (once, in Spark SQL): {fix}")
    return NullValueRefusedError(
        f"a record of topic {topic!r} has a null value (a tombstone), but {table} at {path} was made by an earlier "
        f"release of lakelog, whose value column is NOT NULL. Nothing was written. {todo}")


class StorageError(LakelogError):
    """The root cannot be read or written (permissions, missing mount, an object store's endpoint,
    bucket or credentials)."""


class InvalidPartitionsError(InvalidConfigurationError):
    """A partition count the controller cannot move a topic to (Kafka's InvalidPartitionsException).

    Growing is always allowed; shrinking needs ``controller.delete_partition_enable``.
    """


class ConcurrentTopicChangeError(RetriableError):
    """Another controller changed the topic first with a different change; re-run against its result."""


class LogTruncatedError(LakelogError):
    """A reader's position lies past where the leader's records of the epoch it read under end:
    an unclean election truncated the log under records the reader delivered (Kafka's
    LogTruncationException, KIP-320). Nothing was skipped; the message says where to go back to."""


# A lost root, as every role waits it out (pipelines/waits.py; the server answers it retriably): a
# root storage cannot reach now (StorageError: missing, unmounted, not a directory, refusing access,
# as log_store.delta_errors.lost_root classifies storage's own errors), or a replicated topic's
# leader log that cannot be read or that an election is moving (LeaderNotAvailableError).
LOST_ROOT = (LeaderNotAvailableError, StorageError)
