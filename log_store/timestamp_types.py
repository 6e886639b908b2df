"""Which time a record's timestamp is: Kafka's ``message.timestamp.type``, per record.

A topic's records carry the producer's time (``CreateTime``, Kafka's default and lakelog's) or
the time of the append that wrote them (``LogAppendTime``: the append overwrites whatever the
producer gave, as Kafka's broker does). Kafka marks each record batch with its type, so a topic
switched from one to the other reports its older records with the type they were written
under. lakelog does the same without a column: the log table's property
``lakelog.timestamp_types`` lists every switch with the log ends it was made at (read in the
switch's own metadata commit, which conflicts with every append: no record can fall on the wrong
side of it). A record's type is that of the last switch at or below its offset in its partition
(a partition missing from a switch was created after it: all of it is on the switch's side).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from log_store.errors import InvalidConfigurationError

TIMESTAMP_TYPES_PROP = "lakelog.timestamp_types"
CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"
CODES = {CREATE_TIME: 0, LOG_APPEND_TIME: 1}  # the timestampType column of Spark's Kafka source


class Switch(BaseModel):
    """The topic's timestamp type from the log ends ``since`` (partition -> first offset) on."""

    model_config = ConfigDict(frozen=True)

    kind: str
    since: dict[int, int]


class TimestampTypes(BaseModel):
    """Every switch of a log's timestamp type, oldest first (none: CreateTime throughout)."""

    model_config = ConfigDict(frozen=True)

    switches: tuple[Switch, ...] = ()

    @property
    def current(self) -> str:
        return self.switches[-1].kind if self.switches else CREATE_TIME

    @classmethod
    def of(cls, conf: Mapping[str, str]) -> "TimestampTypes":
        text = conf.get(TIMESTAMP_TYPES_PROP)
        if not text:
            return cls()
        return cls(switches=tuple(Switch(kind=s["kind"], since={int(p): int(o) for p, o in s["since"].items()})
                                  for s in json.loads(text)))

    def switched(self, kind: str, log_ends: Mapping[int, int]) -> "TimestampTypes | None":
        """The types after switching to ``kind`` at ``log_ends``; None if it is the current one."""
        check_kind(kind)
        if kind == self.current:
            return None
        return TimestampTypes(switches=(*self.switches, Switch(kind=kind, since=dict(log_ends))))

    def to_property(self) -> str:
        return json.dumps([{"kind": s.kind, "since": {str(p): o for p, o in sorted(s.since.items())}}
                           for s in self.switches])

    def code_at(self, partition: int, offset: int) -> int:
        """The timestampType (0 CreateTime, 1 LogAppendTime) of the record at ``offset``."""
        kind = CREATE_TIME
        for s in self.switches:
            if offset >= s.since.get(partition, 0):
                kind = s.kind
        return CODES[kind]

    def starts(self, partition: int) -> list[int]:
        """The offsets of ``partition`` where its type may change (a batch of records on the wire
        never spans one)."""
        return sorted({s.since.get(partition, 0) for s in self.switches})

    def sql(self, partition: str = "partition", offset: str = "offset") -> str:
        """``code_at`` as one SQL expression over the columns ``partition`` and ``offset``."""
        expr = "0"
        for s in self.switches:
            cases = " ".join(f"WHEN {int(p)} THEN {int(o)}" for p, o in sorted(s.since.items()))
            since = f"CASE `{partition}` {cases} ELSE 0 END" if cases else "0"
            expr = f"IF(`{offset}` >= {since}, {CODES[s.kind]}, {expr})"
        return expr


def stamp_log_append_time(rows, conf: Mapping[str, str]):
    """Arrow ``rows`` appended from the driver, their ``timestamp`` the append's time when the log
    is LogAppendTime now (as a Spark append stamps its rows); else as they are."""
    import datetime

    import pyarrow as pa

    if TimestampTypes.of(conf).current != LOG_APPEND_TIME or rows.num_rows == 0:
        return rows
    i = rows.schema.get_field_index("timestamp")
    now = datetime.datetime.now(datetime.timezone.utc)
    kind = rows.schema.field(i).type
    stamped = pa.array([now] * rows.num_rows, pa.timestamp("us", tz="UTC")).cast(kind)
    return rows.set_column(i, rows.schema.field(i), stamped)


def check_kind(kind: str) -> str:
    if kind not in CODES:
        raise InvalidConfigurationError(
            f"message.timestamp.type={kind}: give CreateTime (the producer's time, the default) or LogAppendTime "
            "(the time of the append)")
    return kind
