"""The JSON values of the ``lakelog`` data source's offset options (``startingOffsets``,
``endingOffsets``, ``startingOffsetsByTimestamp``, ``assign``), parsed without Spark into frozen
specs, with Spark's Kafka source's sentinels and messages that say what to write instead."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from log_store.errors import InvalidConfigurationError

# The sentinels Spark's Kafka source uses inside offset JSON.
EARLIEST = -2
LATEST = -1
_MAX_LONG = 2**63 - 1  # offsets and timestamps are Java longs in Spark
ASSIGN, STARTING_OFFSETS, ENDING_OFFSETS = "assign", "startingOffsets", "endingOffsets"
STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP = "startingTimestamp", "startingOffsetsByTimestamp"
ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP = "endingTimestamp", "endingOffsetsByTimestamp"

PartitionMap = dict[str, dict[int, int]]
Bounds = Mapping[str, Mapping[int, tuple[int, int]]]

_OFFSETS_EXAMPLE = '{"orders":{"0":23,"1":-1},"payments":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = '{"orders":{"0":1700000000000,"1":1700000000000}}'
_ASSIGN_EXAMPLE = '{"orders":[0,1],"payments":[2,4]}'


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OffsetSpec(_Frozen):
    """Where a read starts or ends: every partition's earliest or latest offset, or explicit
    offsets per topic and partition (``json``; -2 earliest and -1 latest as in Spark)."""

    kind: Literal["earliest", "latest", "json"]
    offsets: PartitionMap | None = None

    @model_validator(mode="after")
    def _offsets_only_for_json(self) -> OffsetSpec:
        if (self.kind == "json") != bool(self.offsets):
            raise ValueError("a json offset spec needs offsets, earliest and latest take none")
        return self


class TimestampSpec(_Frozen):
    """Start (or, ``ending``, end) at each partition's first record at or after a time (epoch
    milliseconds): one time for every partition (``startingTimestamp``, ``endingTimestamp``) or
    one per partition (``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``). Finding
    those offsets needs the data: the caller's job."""

    timestamp: int | None = None
    timestamps: PartitionMap | None = None
    ending: bool = False

    @property
    def option(self) -> str:
        """The option it came from, in Spark's spelling."""
        if self.ending:
            return ENDING_TIMESTAMP if self.timestamp is not None else ENDING_OFFSETS_BY_TIMESTAMP
        return STARTING_TIMESTAMP if self.timestamp is not None else STARTING_OFFSETS_BY_TIMESTAMP

    @model_validator(mode="after")
    def _exactly_one(self) -> TimestampSpec:
        if (self.timestamp is None) == (self.timestamps is None):
            raise ValueError("give either one timestamp or timestamps per partition")
        return self


def parse_long(name: str, text: str, meaning: str) -> int:
    """A decimal Java long, as Spark's ``toLong`` reads it (no exponents, no underscores)."""
    value = text.strip()
    if not re.fullmatch(r"[+-]?\d+", value) or abs(int(value)) > _MAX_LONG:
        raise InvalidConfigurationError(f"{name} must be {meaning}, not {text!r}")
    return int(value)


_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, text: str) -> int:
    """A time as Spark writes one (``JavaUtils.timeStringAsMs``): a whole number and a unit (us, ms,
    s, m or min, h, d; none is ms), as milliseconds."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if not found or found.group(2) not in ("", *_TIME_UNITS) or int(found.group(1)) > _MAX_LONG // 86_400_000:
        raise InvalidConfigurationError(
            f"{name} must be a time such as '15m', '30s' or '500ms' (units us, ms, s, m, min, h, d), not {text!r}")
    return int(int(found.group(1)) * _TIME_UNITS[found.group(2) or "ms"])


def _json_object(name: str, text: str, expected: str):
    """``text`` as JSON whose objects may not repeat a key (a repeat would silently win)."""

    def no_repeats(pairs):
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise InvalidConfigurationError(
                f"{name}: key {', '.join(repr(k) for k in repeated)} appears twice in one JSON object; "
                f"expected {expected}")
        return dict(pairs)

    try:
        return json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as e:
        raise InvalidConfigurationError(
            f"{name}: malformed JSON at line {e.lineno} column {e.colno} ({e.msg}): expected {expected}"
        ) from None


def _partition_number(name: str, topic: str, key: object, expected: str) -> int:
    if isinstance(key, str) and re.fullmatch(r"\d+", key) and int(key) <= 2**31 - 1:
        return int(key)
    if type(key) is int and 0 <= key <= 2**31 - 1:
        return key
    raise InvalidConfigurationError(
        f"{name}: {key!r} under topic '{topic}' is not a partition number: expected {expected}")


def _partition_map(name: str, text: str, expected: str, check: Callable[[str, int, int], None]) -> PartitionMap:
    """A JSON ``{"topic": {"partition": value}}`` map; ``check`` judges each value."""
    data = _json_object(name, text, expected)
    if not isinstance(data, dict) or not data:
        raise InvalidConfigurationError(f"{name}: expected {expected}, got {text.strip()!r}")
    result: PartitionMap = {}
    for topic, partitions in data.items():
        if not topic:
            raise InvalidConfigurationError(f"{name}: a topic name is empty: expected {expected}")
        if not isinstance(partitions, dict) or not partitions:
            raise InvalidConfigurationError(
                f"{name}: topic '{topic}' must map partition numbers to values: expected {expected}")
        per_topic: dict[int, int] = {}
        for key, value in partitions.items():
            partition = _partition_number(name, topic, key, expected)
            if partition in per_topic:
                raise InvalidConfigurationError(
                    f"{name}: topic '{topic}' names partition {partition} twice: give each partition once; "
                    f"expected {expected}")
            if type(value) is not int or abs(value) > _MAX_LONG:
                raise InvalidConfigurationError(
                    f"{name}: the value for topic '{topic}' partition {partition} is {value!r}, not a whole number: "
                    f"expected {expected}")
            check(topic, partition, value)
            per_topic[partition] = value
        result[topic] = per_topic
    return result


_OFFSETS_EXPECTED = ('"earliest", "latest" or JSON {"topic": {"partition": offset}} with -2 for earliest and -1 for '
                     f"latest, e.g. {_OFFSETS_EXAMPLE}")


def parse_starting_offsets(text: str, streaming: bool) -> OffsetSpec:
    name = STARTING_OFFSETS
    value = text.strip()
    if value.lower() == "earliest":
        return OffsetSpec(kind="earliest")
    if value.lower() == "latest":
        if not streaming:
            raise InvalidConfigurationError(
                f'{name}: "latest" is not allowed for batch queries (Spark\'s rule: a batch read from the '
                'latest offsets reads nothing); use "earliest" (the default) or JSON offsets, or '
                "spark.readStream to read what arrives from now on")
        return OffsetSpec(kind="latest")

    def check(topic: str, partition: int, offset: int) -> None:
        if offset < EARLIEST:
            raise InvalidConfigurationError(
                f"{name}: offset {offset} for topic '{topic}' partition {partition} is not an offset: "
                "use an offset >= 0, -2 for earliest or -1 for latest")
        if offset == LATEST and not streaming:
            raise InvalidConfigurationError(
                f"{name}: -1 (latest) for topic '{topic}' partition {partition} is not allowed for batch "
                "queries (Spark's rule); use an offset >= 0 or -2 for earliest")

    return OffsetSpec(kind="json", offsets=_partition_map(name, value, _OFFSETS_EXPECTED, check))


def parse_ending_offsets(text: str) -> OffsetSpec:
    name = ENDING_OFFSETS
    value = text.strip()
    if value.lower() == "latest":
        return OffsetSpec(kind="latest")
    if value.lower() == "earliest":
        raise InvalidConfigurationError(
            f'{name}: "earliest" is not an ending offset (Spark\'s rule); use "latest" (the default) or '
            "JSON offsets with -1 for latest")
    expected = '"latest" or JSON {"topic": {"partition": offset}} with -1 for latest, e.g. {"orders":{"0":23,"1":-1}}'

    def check(topic: str, partition: int, offset: int) -> None:
        if offset == EARLIEST:
            raise InvalidConfigurationError(
                f"{name}: -2 (earliest) for topic '{topic}' partition {partition} is not an ending offset "
                "(Spark's rule); use an offset >= 0 or -1 for latest")
        if offset < LATEST:
            raise InvalidConfigurationError(
                f"{name}: offset {offset} for topic '{topic}' partition {partition} is not an offset: "
                "use an offset >= 0 or -1 for latest")

    return OffsetSpec(kind="json", offsets=_partition_map(name, value, expected, check))


def parse_timestamps(text: str, name: str = STARTING_OFFSETS_BY_TIMESTAMP) -> PartitionMap:
    expected = f'JSON {{"topic": {{"partition": epoch_milliseconds}}}}, e.g. {_TIMESTAMPS_EXAMPLE}'

    def check(topic: str, partition: int, timestamp: int) -> None:
        if timestamp < 0:
            raise InvalidConfigurationError(
                f"{name}: timestamp {timestamp} for topic '{topic}' partition {partition} is negative: "
                "use milliseconds since the epoch (>= 0)")

    return _partition_map(name, text.strip(), expected, check)


def parse_assign(text: str) -> dict[str, tuple[int, ...]]:
    name = ASSIGN
    expected = f'JSON {{"topic": [partition, ...]}}, e.g. {_ASSIGN_EXAMPLE}'
    data = _json_object(name, text.strip(), expected)
    if not isinstance(data, dict) or not data:
        raise InvalidConfigurationError(f"{name}: expected {expected}, got {text.strip()!r}")
    result: dict[str, tuple[int, ...]] = {}
    for topic, partitions in data.items():
        if not topic:
            raise InvalidConfigurationError(f"{name}: a topic name is empty: expected {expected}")
        if not isinstance(partitions, list) or not partitions:
            raise InvalidConfigurationError(
                f"{name}: topic '{topic}' must have a non-empty list of partition numbers: expected {expected}")
        result[topic] = tuple(sorted({_partition_number(name, topic, p, expected) for p in partitions}))
    return result


def check_start_before_end(start: PartitionMap, end: PartitionMap) -> None:
    """Spark's check when both ends are explicit: the same partitions, no start after its end."""
    start_keys = {(t, p) for t, ps in start.items() for p in ps}
    end_keys = {(t, p) for t, ps in end.items() for p in ps}
    if start_keys != end_keys:
        def listed(keys):
            return ", ".join(f"'{t}' partition {p}" for t, p in sorted(keys)) or "none"
        raise InvalidConfigurationError(
            f"{STARTING_OFFSETS} and {ENDING_OFFSETS} must name the same partitions when both are JSON "
            f"(only in {STARTING_OFFSETS}: {listed(start_keys - end_keys)}; only in {ENDING_OFFSETS}: "
            f"{listed(end_keys - start_keys)}); name the same partitions in both, or use \"latest\" as the end")
    for topic, partition in sorted(start_keys):
        first, last = start[topic][partition], end[topic][partition]
        if first >= 0 and last >= 0 and first > last:
            raise InvalidConfigurationError(
                f"{STARTING_OFFSETS} for topic '{topic}' partition {partition} ({first}) is after its "
                f"{ENDING_OFFSETS} ({last}): give a start at or before the end")


