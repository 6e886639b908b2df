"""Where ``groups reset-offsets`` moves a group's positions: Kafka's rules, pure.

``kafka-consumer-groups --reset-offsets`` takes exactly one target (``--to-earliest``,
``--to-latest``, ``--to-datetime``, ``--to-offset``, ``--shift-by``) and clamps the result into
each partition's valid range, [earliest, log end], so a reset never points at records that do not
exist. The same here; the side effects (the liveness check, the commit) are in ``group.admin``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, model_validator

from log_store.errors import InvalidConfigurationError


class ResetTarget(BaseModel):
    """Exactly one of Kafka's reset targets. Naive datetimes are UTC."""

    to_earliest: bool = False
    to_latest: bool = False
    to_datetime: datetime | None = None
    to_offset: int | None = None
    shift_by: int | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "ResetTarget":
        given = [name for name, v in (("--to-earliest", self.to_earliest), ("--to-latest", self.to_latest),
                                       ("--to-datetime", self.to_datetime is not None),
                                       ("--to-offset", self.to_offset is not None),
                                       ("--shift-by", self.shift_by is not None)) if v]
        if len(given) != 1:
            raise InvalidConfigurationError(
                "give exactly one reset target: --to-earliest, --to-latest, --to-datetime ISO, --to-offset N or "
                f"--shift-by N (got {', '.join(given) if given else 'none'})")
        if self.to_offset is not None and self.to_offset < 0:
            raise InvalidConfigurationError(f"--to-offset must be 0 or more (got {self.to_offset}); "
                                            "use --to-earliest for a partition's first record")
        if self.to_datetime is not None and self.to_datetime.tzinfo is not None:
            self.to_datetime = self.to_datetime.astimezone(timezone.utc).replace(tzinfo=None)
        return self

    def describe(self) -> str:
        if self.to_earliest:
            return "earliest"
        if self.to_latest:
            return "latest"
        if self.to_datetime is not None:
            return f"datetime {self.to_datetime.isoformat()} UTC"
        if self.to_offset is not None:
            return f"offset {self.to_offset}"
        return f"shift by {self.shift_by:+d}"


class ResetStep(BaseModel):
    """One partition's move: where the group is (None: never committed) and where it will be."""

    topic: str
    partition: int
    current: int | None
    target: int
    log_start: int
    log_end: int


def parse_partitions(text: str | None, readable: list[int]) -> list[int]:
    """``--partitions 0,3`` (default: every readable partition), checked against the topic."""
    if not text:
        return sorted(readable)
    try:
        chosen = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise InvalidConfigurationError(f"--partitions takes numbers separated by commas, like 0,3 (got {text!r})") from None
    unknown = [p for p in chosen if p not in readable]
    if unknown:
        raise InvalidConfigurationError(
            f"partitions {unknown} are not readable partitions of the topic (readable: {sorted(readable)}); "
            "`lakelog topics describe` lists them")
    return chosen


def plan_reset(topic: str, target: ResetTarget, partitions: list[int], current: dict[int, int],
               starts: dict[int, int], ends: dict[int, int], at_time: dict[int, int] | None = None) -> list[ResetStep]:
    """Each chosen partition's new position, clamped into [start, end] as Kafka clamps.

    ``current``: the group's positions (a partition without one shifts from its start);
    ``starts``/``ends``: the first readable offset and the log end; ``at_time``: for
    ``--to-datetime``, the first offset whose timestamp is at or after it (absent: none is, so the end).
    """
    steps = []
    for p in partitions:
        start, end = starts[p], ends[p]
        if target.to_earliest:
            want = start
        elif target.to_latest:
            want = end
        elif target.to_datetime is not None:
            want = (at_time or {}).get(p, end)
        elif target.to_offset is not None:
            want = target.to_offset
        else:
            want = current.get(p, start) + (target.shift_by or 0)
        steps.append(ResetStep(topic=topic, partition=p, current=current.get(p), target=min(max(want, start), end),
                               log_start=start, log_end=end))
    return steps


def parse_datetime(text: str) -> datetime:
    """An ISO 8601 date-time (``2026-11-23T10:00:00``, with or without an offset; naive is UTC)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidConfigurationError(
            f"--to-datetime takes an ISO 8601 date-time like 2026-11-23T10:00:00 or 2026-11-23T10:00:00+09:00 "
            f"(got {text!r})") from None
