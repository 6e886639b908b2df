"""Options of the ``lakelog`` Spark data source, parsed without Spark.

``spark.read``/``spark.readStream``/``df.write`` with ``format("lakelog")`` take the option names
and meanings of Spark's Kafka source, so a Kafka job moves to lakelog by changing its format and
replacing ``kafka.bootstrap.servers`` with ``root``. Options (strings; keys lower-cased by
PySpark) become frozen models; the offset options' JSON values are ``pipelines.spark.specs``, and
``pipelines.spark.positions`` maps those specs to positions.
A problem raises ``InvalidConfigurationError`` naming the option in Spark's spelling and what to
write instead. Of the ways to say where a read starts the first given wins, as in Spark:
``startingTimestamp``, ``startingOffsetsByTimestamp``, ``startingOffsets``; unlike Spark, a
malformed value of a losing option is still an error.

Options named ``storage.<key>`` are delta-rs storage options for a root in an object store
(``storage.aws_endpoint_url``, ``storage.azure_storage_account_key``, ...), passed through as
Kafka's source passes ``kafka.*`` to its consumer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from log_store.errors import InvalidConfigurationError
from log_store.names import check_group_name
from pipelines.spark.specs import (
    ASSIGN,
    ENDING_OFFSETS,
    ENDING_OFFSETS_BY_TIMESTAMP,
    ENDING_TIMESTAMP,
    STARTING_OFFSETS,
    STARTING_OFFSETS_BY_TIMESTAMP,
    STARTING_TIMESTAMP,
    OffsetSpec,
    TimestampSpec,
    _Frozen,
    check_start_before_end,
    parse_assign,
    parse_duration_ms,
    parse_ending_offsets,
    parse_long,
    parse_starting_offsets,
    parse_timestamps,
)


# Option names, in Spark's spelling.
ROOT, GROUP, TOPIC, PRODUCER_ID = "root", "group", "topic", "producerId"
ACKS, MIN_INSYNC_REPLICAS = "acks", "minInsyncReplicas"
SUBSCRIBE, SUBSCRIBE_PATTERN = "subscribe", "subscribePattern"
FAIL_ON_DATA_LOSS, MAX_OFFSETS_PER_TRIGGER, INCLUDE_HEADERS = "failOnDataLoss", "maxOffsetsPerTrigger", "includeHeaders"
MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY = "minOffsetsPerTrigger", "maxTriggerDelay"
MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION = "minPartitions", "maxRecordsPerPartition"
TIMESTAMP_STRATEGY = "startingOffsetsByTimestampStrategy"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's Kafka source's default, 15m
# How long a read waits for a topic's lost leader root (its return or an election) before it fails,
# as consumers wait (pipelines/waits.py, consumer.leader_wait_timeout_ms); lakelog's own option.
LEADER_WAIT_TIMEOUT = "leaderWaitTimeout"
DEFAULT_LEADER_WAIT_TIMEOUT_MS = 5 * 60 * 1000
# Kafka's consumer setting, under the name Spark's Kafka source passes it to its consumer: which
# records of transactions a read delivers (docs/concepts.md). Spark sets none, so Kafka's consumer
# default applies there: read_uncommitted; here too.
ISOLATION_LEVEL = "kafka.isolation.level"
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# storage.<key>: a delta-rs storage option (credentials, endpoint) for a root in an object store.
STORAGE_PREFIX = "storage."
# Spark may hand a streaming query's checkpoint (and, in a declarative pipeline's sink, the flow's
# query name) to the data source with the other options; they are Spark's own, so both parsers
# accept them and leave them alone.
CHECKPOINT_LOCATION = "checkpointLocation"
QUERY_NAME = "queryName"

SOURCE_OPTIONS = (ROOT, SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN, STARTING_OFFSETS, ENDING_OFFSETS,
                  STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP, TIMESTAMP_STRATEGY, ENDING_TIMESTAMP,
                  ENDING_OFFSETS_BY_TIMESTAMP, FAIL_ON_DATA_LOSS, MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER,
                  MAX_TRIGGER_DELAY, MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION, INCLUDE_HEADERS, GROUP,
                  LEADER_WAIT_TIMEOUT, ISOLATION_LEVEL)
SINK_OPTIONS = (ROOT, TOPIC, PRODUCER_ID, ACKS, MIN_INSYNC_REPLICAS)
_STRATEGIES = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
_IGNORED = {CHECKPOINT_LOCATION.lower(), QUERY_NAME.lower()}
# Spark's Kafka source options that cannot mean here what they mean there, and why.
_NO_BROKER = ("lakelog reads the log's files, with no Kafka consumer to tune")
NOT_APPLICABLE = {
    "groupIdPrefix": "lakelog's reads join no Kafka consumer group (their positions live in the query's "
                     "checkpoint); give group to commit a stream's positions to a lakelog group",
    "kafkaConsumer.pollTimeoutMs": _NO_BROKER,
    "fetchOffset.numRetries": _NO_BROKER,
    "fetchOffset.retryIntervalMs": _NO_BROKER,
}



class SourceOptions(_Frozen):
    """A read's options, checked. Exactly one of ``subscribe``, ``subscribe_pattern`` and
    ``assign`` is set; ``starting`` and ``ending`` are the start and end that apply after Spark's
    precedence; ``ending`` is set for batch reads only, the trigger limits for streams only."""

    streaming: bool
    root: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec | TimestampSpec
    ending: OffsetSpec | TimestampSpec | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"  # no record at or after a starting time
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    leader_wait_timeout_ms: int = DEFAULT_LEADER_WAIT_TIMEOUT_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    group: str | None = None
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    storage: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold secrets: kept out of repr

    @property
    def read_committed(self) -> bool:
        """Whether the read stops at each partition's last stable offset and leaves out aborted
        transactions' records (``kafka.isolation.level``)."""
        return self.isolation_level == "read_committed"

    @property
    def strategy(self) -> str:
        """The option that chose the topics, in Spark's spelling (for messages)."""
        if self.subscribe is not None:
            return SUBSCRIBE
        return SUBSCRIBE_PATTERN if self.subscribe_pattern is not None else ASSIGN


class SinkOptions(_Frozen):
    """A write's options. Without ``topic`` the DataFrame must carry a ``topic`` column; without
    ``producer_id`` every write is a new producer stream (no deduplication across retries)."""

    root: str | None = None
    topic: str | None = None
    producer_id: str | None = None
    acks: Literal["1", "all"] = "1"  # a replicated topic's acknowledgement (docs/replication.md)
    min_insync_replicas: int = 1
    storage: dict[str, str] = Field(default_factory=dict, repr=False)


# -- parsing the option map ----------------------------------------------------------------------
def _collect(options: Mapping[str, object], known: tuple[str, ...], what: str, path_hint: str) -> dict[str, str]:
    """The given options by canonical name, values as strings; unknown keys are errors."""
    canonical = {name.lower(): name for name in known}
    found: dict[str, str] = {}
    spelled: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in options.items():
        lower = str(key).lower()
        if lower == "path":
            raise InvalidConfigurationError(
                f"option 'path' ({value!r}): the lakelog {what} takes no path; {path_hint}")
        if lower == "kafka.acks" and what == "sink":
            raise InvalidConfigurationError(
                f"option '{key}': lakelog is not a Kafka broker; give .option('acks', '1' or 'all') for a replicated "
                "topic's acknowledgement")
        if lower.startswith("kafka.") and lower not in canonical:
            raise InvalidConfigurationError(
                f"option '{key}': lakelog is not a Kafka broker, so kafka.* options do not apply: "
                "use root (.option('root', PATH_OR_URI)) to say which lakelog to use")
        if lower in _IGNORED or lower.startswith(STORAGE_PREFIX):
            continue
        refused = next((why for name, why in NOT_APPLICABLE.items() if name.lower() == lower), None)
        if refused and what != "sink":
            raise InvalidConfigurationError(f"option '{key}' does not apply to lakelog: {refused}; drop it")
        if lower not in canonical:
            unknown.append(str(key))
            continue
        name = canonical[lower]
        if name in found:
            raise InvalidConfigurationError(
                f"option {name} is given twice (as '{spelled[name]}' and '{key}'): give it once")
        if value is None:
            raise InvalidConfigurationError(f"{name}: no value given; give one or leave the option out")
        found[name] = str(value).lower() if isinstance(value, bool) else str(value)
        spelled[name] = str(key)
    if unknown:
        names = ", ".join(f"'{k}'" for k in sorted(unknown))
        raise InvalidConfigurationError(
            f"unknown option(s) {names} for the lakelog {what}: the known options are "
            f"{', '.join(known)}, and {STORAGE_PREFIX}<key> for a remote root's storage options "
            f"(Spark's {CHECKPOINT_LOCATION} and {QUERY_NAME} are accepted and ignored)")
    return found


def _storage(options: Mapping[str, object]) -> dict[str, str]:
    """The ``storage.<key>`` options as delta-rs storage options: keys lower-cased (as PySpark
    passes them; delta-rs takes either case), values as given."""
    found: dict[str, str] = {}
    for key, value in options.items():
        lower = str(key).lower()
        if not lower.startswith(STORAGE_PREFIX):
            continue
        name = lower[len(STORAGE_PREFIX):].strip()
        if not name:
            raise InvalidConfigurationError(
                f"option '{key}' names no storage option: write storage.<key>, e.g. storage.aws_endpoint_url")
        if name in found:
            raise InvalidConfigurationError(f"storage option '{name}' is given twice: give it once")
        if value is None:
            raise InvalidConfigurationError(f"{key}: no value given; give one or leave the option out")
        found[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return found


def _nonempty(name: str, text: str, what: str) -> str:
    value = text.strip()
    if not value:
        raise InvalidConfigurationError(f"{name} is empty: give {what}, or leave the option out")
    return value


def _boolean(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigurationError(f"{name} must be true or false, not {text!r}")
    return value == "true"


def _subscribe(text: str) -> tuple[str, ...]:
    topics = [t.strip() for t in text.split(",") if t.strip()]
    if not topics:
        raise InvalidConfigurationError(
            f"{SUBSCRIBE} names no topics ({text!r}): give a comma-separated list such as 'orders,payments'")
    return tuple(dict.fromkeys(topics))


def _subscribe_pattern(text: str) -> str:
    pattern = _nonempty(SUBSCRIBE_PATTERN, text, "a regular expression that matches whole topic names")
    try:
        re.compile(pattern)
    except re.error as e:
        raise InvalidConfigurationError(
            f"{SUBSCRIBE_PATTERN}: {pattern!r} is not a valid regular expression ({e}): give a Python regular "
            r"expression that matches whole topic names, e.g. 'orders\..*'") from None
    return pattern


def _epoch_ms(name: str, given: dict[str, str]) -> int | None:
    if name not in given:
        return None
    value = parse_long(name, given[name], "milliseconds since the epoch (a whole number >= 0)")
    if value < 0:
        raise InvalidConfigurationError(f"{name} must be milliseconds since the epoch (>= 0), not {value}")
    return value


def _positive(name: str, given: dict[str, str], meaning: str) -> int | None:
    if name not in given:
        return None
    value = parse_long(name, given[name], meaning)
    if value <= 0:
        raise InvalidConfigurationError(f"{name} must be {meaning}, not {value}")
    return value


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Check a read's options (Spark's Kafka source options, with ``root`` for the brokers) and
    return them as a model; ``streaming`` is True for ``spark.readStream``."""
    what = "stream source" if streaming else "source"
    given = _collect(options, SOURCE_OPTIONS, what,
                     "pass the root with .option('root', ...) and the topics with subscribe, "
                     "subscribePattern or assign")

    strategies = [name for name in _STRATEGIES if name in given]
    if len(strategies) != 1:
        got = f"got {' and '.join(strategies)}" if strategies else "got none"
        raise InvalidConfigurationError(
            f"give exactly one of {SUBSCRIBE} (comma-separated topics), {SUBSCRIBE_PATTERN} (a regular "
            f"expression) or {ASSIGN} (JSON {{\"topic\": [partitions]}}) to say what to read ({got})")

    endings = [name for name in (ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP) if name in given]
    if endings and streaming:
        raise InvalidConfigurationError(
            f"{endings[0]} is for batch queries: a stream reads on as records arrive; drop the option "
            "or read with spark.read")

    # Every given start is checked; the first of Spark's order is the one that applies.
    timestamp = _epoch_ms(STARTING_TIMESTAMP, given)
    timestamps = parse_timestamps(given[STARTING_OFFSETS_BY_TIMESTAMP]) if STARTING_OFFSETS_BY_TIMESTAMP in given else None
    overridden = timestamp is not None or timestamps is not None
    if STARTING_OFFSETS in given:
        # A start a timestamp overrides is not used, so batch's "not latest" rule does not apply to it.
        offsets = parse_starting_offsets(given[STARTING_OFFSETS], streaming or overridden)
    else:
        offsets = OffsetSpec(kind="latest" if streaming else "earliest")
    starting: OffsetSpec | TimestampSpec
    if timestamp is not None:
        starting = TimestampSpec(timestamp=timestamp)
    elif timestamps is not None:
        starting = TimestampSpec(timestamps=timestamps)
    else:
        starting = offsets
    strategy = given.get(TIMESTAMP_STRATEGY, "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfigurationError(
            f"{TIMESTAMP_STRATEGY} must be error (fail when a partition has no record at or after the starting "
            f"time) or latest (start such a partition at its latest offset), not {given[TIMESTAMP_STRATEGY]!r}")

    ending = None
    if not streaming:
        # Spark's precedence for the end: endingTimestamp, endingOffsetsByTimestamp, endingOffsets.
        end_time = _epoch_ms(ENDING_TIMESTAMP, given)
        end_times = (parse_timestamps(given[ENDING_OFFSETS_BY_TIMESTAMP], ENDING_OFFSETS_BY_TIMESTAMP)
                     if ENDING_OFFSETS_BY_TIMESTAMP in given else None)
        ending = parse_ending_offsets(given[ENDING_OFFSETS]) if ENDING_OFFSETS in given else OffsetSpec(kind="latest")
        if end_time is not None:
            ending = TimestampSpec(timestamp=end_time, ending=True)
        elif end_times is not None:
            ending = TimestampSpec(timestamps=end_times, ending=True)
        elif isinstance(starting, OffsetSpec) and starting.kind == "json" and ending.kind == "json":
            check_start_before_end(starting.offsets, ending.offsets)

    max_offsets = _positive(MAX_OFFSETS_PER_TRIGGER, given, "a positive number of records")
    min_offsets = _positive(MIN_OFFSETS_PER_TRIGGER, given, "a positive number of records")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise InvalidConfigurationError(
            f"{MIN_OFFSETS_PER_TRIGGER} ({min_offsets}) is above {MAX_OFFSETS_PER_TRIGGER} ({max_offsets}): a "
            "micro-batch could never hold enough records; give a minimum at or below the maximum")
    delay = (parse_duration_ms(MAX_TRIGGER_DELAY, given[MAX_TRIGGER_DELAY]) if MAX_TRIGGER_DELAY in given
             else DEFAULT_MAX_TRIGGER_DELAY_MS)
    if not streaming:
        max_offsets = min_offsets = None  # as in Spark, a batch read takes its whole range at once

    return SourceOptions(
        streaming=streaming,
        root=_nonempty(ROOT, given[ROOT], "a lakelog root path or URI") if ROOT in given else None,
        subscribe=_subscribe(given[SUBSCRIBE]) if SUBSCRIBE in given else None,
        subscribe_pattern=_subscribe_pattern(given[SUBSCRIBE_PATTERN]) if SUBSCRIBE_PATTERN in given else None,
        assign=parse_assign(given[ASSIGN]) if ASSIGN in given else None,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_boolean(FAIL_ON_DATA_LOSS, given[FAIL_ON_DATA_LOSS]) if FAIL_ON_DATA_LOSS in given else True,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=delay,
        leader_wait_timeout_ms=(parse_duration_ms(LEADER_WAIT_TIMEOUT, given[LEADER_WAIT_TIMEOUT])
                                if LEADER_WAIT_TIMEOUT in given else DEFAULT_LEADER_WAIT_TIMEOUT_MS),
        min_partitions=_positive(MIN_PARTITIONS, given, "a positive number of Spark tasks"),
        max_records_per_partition=_positive(MAX_RECORDS_PER_PARTITION, given, "a positive number of records"),
        include_headers=_boolean(INCLUDE_HEADERS, given[INCLUDE_HEADERS]) if INCLUDE_HEADERS in given else False,
        group=check_group_name(given[GROUP]) if GROUP in given else None,
        isolation_level=_isolation_level(given),
        storage=_storage(options),
    )


def _isolation_level(given: dict[str, str]) -> str:
    """``kafka.isolation.level``, one of Kafka's two (default read_uncommitted, as Spark's Kafka
    source leaves its consumer's)."""
    level = given.get(ISOLATION_LEVEL, ISOLATION_LEVELS[0]).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise InvalidConfigurationError(
            f"{ISOLATION_LEVEL} must be read_uncommitted (every record, open and aborted transactions' too) or "
            f"read_committed (committed transactions' records only, up to the last stable offset), "
            f"not {given[ISOLATION_LEVEL]!r}")
    return level


def _acks(given: dict[str, str]) -> str:
    """Kafka's ``acks``: 1 (the leader root committed) or all (and every in-sync root holds it; -1
    as in Kafka). 0 cannot mean here what it means there: an append returns once committed."""
    value = given.get(ACKS, "1").strip().lower()
    if value in ("all", "-1"):
        return "all"
    if value == "1":
        return "1"
    if value == "0":
        raise InvalidConfigurationError(
            f"{ACKS}=0: a lakelog write always returns once its append is committed at the leader root (acks=1); "
            "give 1, or all to wait for every in-sync root of a replicated topic")
    raise InvalidConfigurationError(f"{ACKS} must be 1 or all (-1), not {given[ACKS]!r}")


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a write's options (``root``, ``topic``, ``producerId``, ``acks``,
    ``minInsyncReplicas``) and return them as a model."""
    given = _collect(options, SINK_OPTIONS, "sink",
                     "pass the root with .option('root', ...) and the topic with .option('topic', ...) "
                     "or a topic column")
    return SinkOptions(
        acks=_acks(given),
        min_insync_replicas=_positive(MIN_INSYNC_REPLICAS, given, "a positive number of in-sync roots") or 1,
        root=_nonempty(ROOT, given[ROOT], "a lakelog root path or URI") if ROOT in given else None,
        topic=_nonempty(TOPIC, given[TOPIC], "a topic name (or a topic column in the DataFrame)")
        if TOPIC in given else None,
        producer_id=_nonempty(PRODUCER_ID, given[PRODUCER_ID], "an idempotent producer id")
        if PRODUCER_ID in given else None,
        storage=_storage(options),
    )


# -- resolving against the root ------------------------------------------------------------------
