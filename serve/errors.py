"""lakelog's errors as Kafka's error codes: the one place a handler turns an exception into the
code a Kafka client acts on (retriable ones make it refresh metadata and try again)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from log_store.errors import (
    ConcurrentCommitError, FencedLeaderEpochError, IllegalGenerationError, InvalidConfigurationError,
    InvalidPartitionMetadataError, InvalidPartitionsError, InvalidRecordError, LakelogError, LeaderNotAvailableError,
    NotEnoughReplicasError, ProducerFencedError, StorageError, TopicExistsError, UnknownGroupError, UnknownTopicError,
)

log = logging.getLogger("lakelog.serve")

# Most specific first: an exception takes the code of the first class it is an instance of.
_CODES: list[tuple[type[Exception], str]] = [
    (FencedLeaderEpochError, "NOT_LEADER_OR_FOLLOWER"),
    (InvalidPartitionMetadataError, "NOT_LEADER_OR_FOLLOWER"),
    (LeaderNotAvailableError, "LEADER_NOT_AVAILABLE"),
    (NotEnoughReplicasError, "NOT_ENOUGH_REPLICAS"),
    (ConcurrentCommitError, "REQUEST_TIMED_OUT"),
    (ProducerFencedError, "INVALID_PRODUCER_EPOCH"),  # a transactional append below the partition's epoch
    (UnknownTopicError, "UNKNOWN_TOPIC_OR_PARTITION"),
    (TopicExistsError, "TOPIC_ALREADY_EXISTS"),
    (InvalidPartitionsError, "INVALID_PARTITIONS"),
    (IllegalGenerationError, "ILLEGAL_GENERATION"),
    (UnknownGroupError, "GROUP_ID_NOT_FOUND"),
    (InvalidRecordError, "INVALID_RECORD"),
    (InvalidConfigurationError, "INVALID_CONFIG"),
    (StorageError, "KAFKA_STORAGE_ERROR"),
]


def code_of(error: str | Exception) -> int:
    """Kafka's error code for a code name (``"NOT_COORDINATOR"``) or an exception."""
    if isinstance(error, str):
        return int(ErrorCode[error.lower()])
    for kind, name in _CODES:
        if isinstance(error, kind):
            return int(ErrorCode[name.lower()])
    # The client learns only "unknown server error": the server's log is where an operator finds why.
    log.error("answered UNKNOWN_SERVER_ERROR for %r", error, exc_info=error if error.__traceback__ else None)
    return int(ErrorCode.unknown_server_error)


def name_of(error: Exception) -> str:
    """The name of ``error``'s Kafka code."""
    return ErrorCode(code_of(error)).name.upper()


def unreachable(replicated: bool) -> str:
    """A partition's answer while its topic's log cannot be reached (its root lost: missing,
    unmounted, not a directory, refusing access): on a replicated topic its leader's root is lost,
    and the answer is Kafka's for a broker that does not lead the partition, NOT_LEADER_OR_FOLLOWER
    (clients refresh metadata and follow the election); on a topic with one root, Kafka's for a
    log directory gone offline, KAFKA_STORAGE_ERROR. Kafka's clients retry both until their
    ``delivery.timeout.ms``."""
    return "NOT_LEADER_OR_FOLLOWER" if replicated else "KAFKA_STORAGE_ERROR"


def message_of(error: Exception) -> str | None:
    """The text a response's error message carries: lakelog's own, for its errors."""
    return str(error) if isinstance(error, LakelogError) else None
