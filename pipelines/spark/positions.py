"""Where a ``lakelog`` Spark read starts and ends, once its options are parsed
(``pipelines.spark.options``) and each partition's bounds are known: which topics a read covers,
and the offset specs mapped to positions, with Spark's Kafka source's rules. Pure: no Spark."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from log_store.errors import InvalidConfigurationError, UnknownTopicError
from pipelines.spark.options import SourceOptions
from pipelines.spark.specs import (
    ASSIGN,
    EARLIEST,
    ENDING_OFFSETS,
    LATEST,
    STARTING_OFFSETS,
    Bounds,
    OffsetSpec,
    PartitionMap,
    TimestampSpec,
)


def resolve_topics(opts: SourceOptions, known: Iterable[str]) -> list[str]:
    """The topics a read covers, sorted. Named topics (``subscribe``, ``assign``) must exist; a
    pattern must match a whole name (Java's ``matches()``, as Spark's Kafka source uses) and may
    match none (the read then has nothing yet)."""
    existing = set(known)
    if opts.subscribe_pattern is not None:
        pattern = re.compile(opts.subscribe_pattern)
        return sorted(t for t in existing if pattern.fullmatch(t))
    named = opts.subscribe if opts.subscribe is not None else tuple(opts.assign or ())
    missing = sorted(set(named) - existing)
    if missing:
        raise UnknownTopicError(
            f"{opts.strategy} names topic(s) that do not exist under this root: "
            f"{', '.join(repr(t) for t in missing)}; `lakelog topics list` shows the topics "
            "(`lakelog topics create` makes one)")
    return sorted(set(named))


def bounds_to_read(opts: SourceOptions, bounds: Bounds) -> dict[str, dict[int, tuple[int, int]]]:
    """``bounds`` cut down to the partitions the read covers: all of each resolved topic's, or for
    ``assign`` the assigned ones (each must exist). The result is what the position functions
    below expect as their ``bounds``."""
    topics = resolve_topics(opts, bounds)
    if opts.assign is None:
        return {t: dict(bounds[t]) for t in topics}
    result: dict[str, dict[int, tuple[int, int]]] = {}
    for topic in topics:
        missing = [p for p in opts.assign[topic] if p not in bounds[topic]]
        if missing:
            raise InvalidConfigurationError(
                f"{ASSIGN} names partition(s) {', '.join(map(str, missing))} of topic '{topic}', which has "
                f"partitions {_describe_partitions(bounds[topic])}: assign only existing partitions "
                f"(`lakelog topics describe --topic {topic}` lists them)")
        result[topic] = {p: bounds[topic][p] for p in opts.assign[topic]}
    return result


def _describe_partitions(partitions: Iterable[int]) -> str:
    numbers = sorted(partitions)
    return ", ".join(map(str, numbers)) if numbers else "none"


def _check_names_every_partition(name: str, given: PartitionMap, partitions: Mapping[str, Iterable[int]]) -> None:
    """Spark's rule for explicit offsets and per-partition timestamps: the JSON names exactly the
    partitions the read covers, so no partition's start is guessed."""
    for topic in sorted(given):
        if topic not in partitions:
            raise InvalidConfigurationError(
                f"{name} names topic '{topic}', which this read does not cover "
                f"(it reads {', '.join(repr(t) for t in sorted(partitions)) or 'no topics'}); "
                "name only the topics the read subscribes to or assigns")
    for topic in sorted(partitions):
        if topic not in given:
            raise InvalidConfigurationError(
                f"{name} JSON must name every partition the read covers: topic '{topic}' is missing; "
                "add it (use -2 for earliest or -1 for latest where you do not care)")
        wanted, named = set(partitions[topic]), set(given[topic])
        if wanted - named:
            raise InvalidConfigurationError(
                f"{name} JSON must name every partition the read covers: topic '{topic}' lacks partition(s) "
                f"{_describe_partitions(wanted - named)}; add them (use -2 for earliest or -1 for latest "
                "where you do not care)")
        if named - wanted:
            raise InvalidConfigurationError(
                f"{name} names partition(s) {_describe_partitions(named - wanted)} of topic '{topic}', which "
                f"the read does not cover (its partitions: {_describe_partitions(wanted)}); leave them out")


def _positions(name: str, spec: OffsetSpec, bounds: Bounds) -> dict[str, dict[int, int]]:
    if spec.kind == "earliest":
        return {t: {p: lo for p, (lo, _) in ps.items()} for t, ps in bounds.items()}
    if spec.kind == "latest":
        return {t: {p: hi for p, (_, hi) in ps.items()} for t, ps in bounds.items()}
    _check_names_every_partition(name, spec.offsets, bounds)
    resolved = {EARLIEST: 0, LATEST: 1}
    return {
        t: {p: bounds[t][p][resolved[o]] if o in resolved else o for p, o in sorted(spec.offsets[t].items())}
        for t in sorted(spec.offsets)
    }


def starting_positions(spec: OffsetSpec, bounds: Bounds) -> dict[str, dict[int, int]]:
    """The offset each partition's read starts at. ``bounds`` gives, for every partition the read
    covers (see ``bounds_to_read``), its (earliest, latest) offsets; earliest/latest and -2/-1
    map to them. Explicit offsets are kept as given, also outside the bounds: whether that is
    data loss is the caller's decision (``failOnDataLoss``). As in Spark, a JSON spec must name
    exactly the partitions the read covers: a missing or extra topic or partition is an error."""
    return _positions(STARTING_OFFSETS, spec, bounds)


def ending_positions(spec: OffsetSpec, bounds: Bounds) -> dict[str, dict[int, int]]:
    """The offset each partition's batch read ends before: latest and -1 map to the latest
    bound, explicit offsets are kept; earliest is not an end. JSON must name exactly the
    partitions the read covers, as for ``starting_positions``."""
    if spec.kind == "earliest" or (spec.offsets and any(o == EARLIEST for ps in spec.offsets.values()
                                                        for o in ps.values())):
        raise InvalidConfigurationError(
            f'{ENDING_OFFSETS}: earliest (-2) is not an ending offset; use "latest" or an offset per partition')
    return _positions(ENDING_OFFSETS, spec, bounds)


def in_open_transaction(start: int, stable: int, log_end: int) -> bool:
    """Whether ``start`` lies past a partition's last stable offset ``stable`` but within its log
    (read_committed): the records there are not lost, only not committed yet. A consumer's
    position there gets nothing until the last stable offset passes it; a stream waits there."""
    return stable < start <= log_end


def check_start_in_open_transaction(topic: str, partition: int, start: int, end: int, stable: int,
                                    log_end: int) -> None:
    """A read_committed batch read starting in an open transaction (``in_open_transaction``)
    ends at the last stable offset at most, before its start: refused whatever failOnDataLoss
    says, as Spark's Kafka batch read refuses a beginning offset after its ending offset (an
    assertion there). An end given at the start (an empty range) reads nothing, without error."""
    if end == start:
        return
    raise InvalidConfigurationError(
        f"topic '{topic}' partition {partition}: startingOffsets {start} is past the last stable offset {stable} "
        f"(kafka.isolation.level=read_committed; offsets {stable}-{log_end - 1} hold a transaction not ended yet), "
        f"and a read_committed batch read ends there at most, so it would start after its end ({min(end, stable)}); "
        f"start at or below {stable}, read with read_uncommitted, or read again once the transaction has ended "
        "(a stream started there waits for it)")


def timestamp_targets(spec: TimestampSpec, partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[int, int]]:
    """The time (epoch ms) each covered partition starts at: ``startingTimestamp`` for all of them,
    or ``startingOffsetsByTimestamp``'s, which must name exactly the covered partitions (Spark's
    rule). The caller turns each into the first offset at or after it. The same for the ending
    times of ``endingTimestamp`` and ``endingOffsetsByTimestamp``."""
    if spec.timestamp is not None:
        return {t: {p: spec.timestamp for p in sorted(ps)} for t, ps in sorted(partitions.items())}
    _check_names_every_partition(spec.option, spec.timestamps, partitions)
    return {t: dict(sorted(ps.items())) for t, ps in sorted(spec.timestamps.items())}


def behind_latest(latest: Mapping[str, Mapping[int, int]], consumed: Mapping[str, Mapping[int, int]]) -> dict[str, str]:
    """Spark's Kafka source's metrics in a query's progress: per partition, how many records its
    consumed position is behind the latest log end (``latest``), as the smallest, the largest
    and the mean over partitions (strings, as Kafka's source gives them); none without partitions."""
    behind = [max(latest[t][p] - o, 0) for t, ps in consumed.items() for p, o in ps.items() if p in latest.get(t, {})]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}
