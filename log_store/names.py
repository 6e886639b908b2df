"""Every identifier lakelog builds from user-given names, built and parsed here only.

Topic, group, member and producer names may hold dots (``orders.v1``, ``billing.svc``), so an
identifier that joins two names with a separator is ambiguous: group ``a`` on topic ``b.c`` and
group ``a.b`` on topic ``c`` once shared the sink position ``lakelog.sink.a.b.c.0``. An identifier
that carries more than one name is therefore a fixed prefix and the names as one JSON array
(``lakelog.sink:["a","b.c",0,0]``), which reads back exactly. An identifier with one name is a
fixed prefix and the name, the whole rest of the string; nothing parses those by prefix.

Formats written before the JSON ones (``LEGACY_*``) are read where a table may still hold them
(sinks and heartbeat ticks of roots written by earlier releases), never written.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from log_store.errors import InvalidConfigurationError

SINK_PREFIX = "lakelog.sink:"
HEARTBEAT_PREFIX = "lakelog.heartbeat:"
LEGACY_SINK_PREFIX = "lakelog.sink."
LEGACY_HEARTBEAT_PREFIX = "lakelog.heartbeat."
PRODUCER_PREFIX = "lakelog.producer."
STREAM_BATCH_PREFIX = "lakelog.stream_batch."
LOG_END_PREFIX = "lakelog.log_end."
LOG_START_PREFIX = "lakelog.log_start."
CLEANED_PREFIX = "lakelog.cleaned."
JUDGED_PREFIX = "lakelog.judged."
HIGH_WATERMARK_PREFIX = "lakelog.high_watermark."
FENCE_PREFIX = "lakelog.fence."
GENERATION_PREFIX = "lakelog.generation."
TOPIC_VERSION_PREFIX = "lakelog.topicVersion."


# -- the names users give: Kafka's rules, checked here only ---------------------------------------
NAME_MAX = 249  # Kafka's longest topic name
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_topic_name(name: object) -> str:
    """``name`` if Kafka would take it as a topic name: 1-249 of ASCII letters, digits, '.', '_'
    and '-', and not '.' or '..' (a topic is a folder under the root); else an error saying so.
    The whole name must match: a trailing newline is refused, not trimmed."""
    if not isinstance(name, str) or not name:
        raise InvalidConfigurationError("a topic name is required: 1-249 letters, digits, '.', '_' or '-'")
    if name in (".", ".."):
        raise InvalidConfigurationError(f"invalid topic name {name!r}: '.' and '..' are not topic names")
    if len(name) > NAME_MAX or not _TOPIC_NAME.fullmatch(name):
        raise InvalidConfigurationError(
            f"invalid topic name {name!r}: use 1-{NAME_MAX} ASCII letters, digits, '.', '_' or '-'")
    return name


def check_group_name(name: object) -> str:
    """``name`` if it can name a consumer group: 1-249 characters, none of them a control
    character (a newline, a tab) or surrounding space; Kafka takes any non-empty group id, and
    lakelog writes these into table properties, ids and reports."""
    if not isinstance(name, str) or not name:
        raise InvalidConfigurationError("a consumer group id must not be empty; pass --group NAME")
    if len(name) > NAME_MAX or _CONTROL.search(name) or name != name.strip():
        raise InvalidConfigurationError(
            f"invalid group id {name!r}: use 1-{NAME_MAX} characters without control characters (newlines, "
            "tabs) or leading and trailing spaces")
    return name


def _encode(prefix: str, *parts: Any) -> str:
    return prefix + json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def _decode(prefix: str, text: str, types: tuple[type, ...]) -> list | None:
    if not text.startswith(prefix):
        return None
    try:
        parts = json.loads(text[len(prefix):])
    except ValueError:
        return None
    if (not isinstance(parts, list) or len(parts) != len(types)
            or not all(type(v) is t for v, t in zip(parts, types))):
        return None
    return parts


# -- sink positions (Delta application ids of a sink table) --------------------------------------
class SinkId(NamedTuple):
    group: str
    topic: str
    partition: int
    incarnation: int  # the operator's resets of the partition's positions (and the group's deletions)


def sink_app_id(group: str, topic: str, partition: int, incarnation: int = 0) -> str:
    """The application id under which a sink holds ``group``'s position on one partition."""
    return _encode(SINK_PREFIX, group, topic, int(partition), int(incarnation))


def parse_sink_app_id(app_id: str) -> SinkId | None:
    """The ``SinkId`` an application id names, or None if it is not a sink position."""
    parts = _decode(SINK_PREFIX, app_id, (str, str, int, int))
    return SinkId(*parts) if parts else None


_LEGACY_TAIL = re.compile(r"(\d+)(?:\.r(\d+))?")


def legacy_sink_id(app_id: str, group: str, topic: str) -> tuple[int, int] | None:
    """(partition, incarnation) if ``app_id`` has the earlier releases' form for ``group`` on
    ``topic`` (``lakelog.sink.<group>.<topic>.<partition>[.r<incarnation>]``). Such an id may
    equally belong to another pair whose names join to the same text: the caller decides."""
    head = f"{LEGACY_SINK_PREFIX}{group}.{topic}."
    if not app_id.startswith(head):
        return None
    m = _LEGACY_TAIL.fullmatch(app_id[len(head):])
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def legacy_sink_pairs(app_id: str, topics: set[str]) -> list[tuple[str, str, int, int]]:
    """Every (group, topic, partition, incarnation) among ``topics`` that an earlier release's
    sink id can stand for."""
    if not app_id.startswith(LEGACY_SINK_PREFIX):
        return []
    out = []
    for topic in topics:
        rest = app_id[len(LEGACY_SINK_PREFIX):]
        marker = f".{topic}."
        at = rest.find(marker)
        while at > 0:
            tail = _LEGACY_TAIL.fullmatch(rest[at + len(marker):])
            if tail:
                out.append((rest[:at], topic, int(tail.group(1)), int(tail.group(2) or 0)))
            at = rest.find(marker, at + 1)
    return out


# -- heartbeat ticks (application ids of the heartbeat table) -------------------------------------
def heartbeat_app_id(group: str, member_id: str) -> str:
    return _encode(HEARTBEAT_PREFIX, group, member_id)


def heartbeat_member(app_id: str, group: str) -> str | None:
    """The member a heartbeat tick of ``group`` names, or None if it is another group's. Ticks in
    the earlier form (``lakelog.heartbeat.<group>.<member>``) are read for member ids without a
    dot, which lakelog generates; a dotted one could be another group's."""
    parts = _decode(HEARTBEAT_PREFIX, app_id, (str, str))
    if parts is not None:
        return parts[1] if parts[0] == group else None
    head = f"{LEGACY_HEARTBEAT_PREFIX}{group}."
    rest = app_id[len(head):] if app_id.startswith(head) else ""
    return rest if rest and "." not in rest else None


# -- one name each: a fixed prefix and the name ----------------------------------------------------
def producer_app_id(producer_id: str) -> str:
    return PRODUCER_PREFIX + producer_id


def stream_batch_app_id(producer_id: str) -> str:
    """Which micro-batch a stream sink's producer landed last (``pipelines.spark.sink``)."""
    return STREAM_BATCH_PREFIX + producer_id


def log_end_app_id(partition: int) -> str:
    return f"{LOG_END_PREFIX}{int(partition)}"


def log_start_app_id(partition: int) -> str:
    """A partition's log start offset (Kafka's logStartOffset): records below it were deleted
    (retention, delete-records). Set in the same commit that removes their files."""
    return f"{LOG_START_PREFIX}{int(partition)}"


def cleaned_app_id(partition: int) -> str:
    """How far key compaction has cleaned a partition (Kafka's cleaner checkpoint): the records
    below it were compacted, those from it on are dirty. Set in the commit that rewrites their files."""
    return f"{CLEANED_PREFIX}{int(partition)}"


def judged_app_id(partition: int) -> str:
    """How far a resized topic's partition was judged topic-wide by key compaction (its cleanable
    end at the last look at every partition, ``log_store.key_compaction``): a counter, free to fall."""
    return f"{JUDGED_PREFIX}{int(partition)}"


def high_watermark_app_id(partition: int | None) -> str:
    """A replicated log's kept high watermark of ``partition`` (None: the leader epoch it was kept
    under), as Kafka's leader keeps its own in its log directory's checkpoint."""
    return f"{HIGH_WATERMARK_PREFIX}{'epoch' if partition is None else int(partition)}"


def fence_property(group: str) -> str:
    return FENCE_PREFIX + group


def generation_property(group: str) -> str:
    return GENERATION_PREFIX + group


def topic_version_property(topic: str) -> str:
    return TOPIC_VERSION_PREFIX + topic


# -- commit metadata ----------------------------------------------------------------------------
def commit_metadata(kind: str, **fields: Any) -> str:
    """A lakelog commit's user metadata (Delta's commit info, shown by DESCRIBE HISTORY): JSON
    with ``lakelog`` naming what the commit is, whatever the names in ``fields`` hold."""
    return json.dumps({"lakelog": kind, **fields}, ensure_ascii=False, separators=(",", ":"))


def sink_commit_metadata(group: str, topic: str, member_id: str, ranges: dict[int, tuple[int, int]],
                         log: str | None = None, log_version: int | None = None) -> str:
    """A sink commit's metadata: which group's batch it is, so a sink that several groups write
    is judged group by group (the audit, the campaign's checker). ``log`` and ``log_version``: the
    log table and version the batch was read at, where known: every record of ``ranges`` the log
    held there is in the batch, which orders the batch against the log's own commits (a record key
    compaction removed after that version was there to deliver)."""
    read = {"log": log, "log_version": log_version} if log is not None and log_version is not None else {}
    return commit_metadata("sink", group=group, topic=topic, member=member_id,
                           ranges={str(p): [s, e] for p, (s, e) in sorted(ranges.items())}, **read)


def parse_commit_metadata(text: str | None) -> dict | None:
    """A lakelog commit's metadata, or None for another writer's (or none)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "lakelog" in value else None


# -- SQL view names -----------------------------------------------------------------------------
def log_view_name(topic: str) -> str:
    """The SQL name of a topic's log: ``log_`` and the name, other characters as ``_``
    (``orders.v1`` -> ``log_orders_v1``). Two topics can share one (``a.b``, ``a_b``):
    ``log_view_names`` leaves such a name out rather than pick one."""
    return "log_" + re.sub(r"[^A-Za-z0-9_]", "_", topic)


def log_view_names(topics: list[str]) -> dict[str, str]:
    """View name -> topic for the topics whose view name no other topic shares (case-insensitive,
    as SQL names are)."""
    by_name: dict[str, list[str]] = {}
    for t in topics:
        by_name.setdefault(log_view_name(t).lower(), []).append(t)
    return {log_view_name(ts[0]): ts[0] for ts in by_name.values() if len(ts) == 1}
