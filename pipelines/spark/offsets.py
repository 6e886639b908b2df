"""A stream's offset: where it stands on each partition of each topic it reads, typed, with one
JSON form (Spark's Kafka source's ``KafkaSourceOffset`` and ``JsonUtils``).

Spark compares two offsets by their JSON, so the JSON holds only what identifies a position, in
one canonical order: two offsets are equal exactly when their positions are, and a commit to
the log that moves no position (another producer's append past the end of a capped run, a
compaction, retention) makes no new offset and no empty micro-batch. Per topic it names the
incarnation read (the log table's id: a topic deleted and created again has a new one) and the
topic version the stream first planned it at (its view: partitions retired after it, read or
not, are the stream's to account for), and for a replicated topic the leader epoch its positions
were planned under (the divergence check after an unclean election). ``v`` is the format's version.

Offsets written by the earlier release (``{"topics": ..., "versions": ...}``) are read, with the
incarnation and view unknown (``None``): the current incarnation is taken as the one read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from log_store.errors import InvalidConfigurationError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TopicOffset:
    """One topic's positions (partition -> next offset to read) in the incarnation ``topic_id``,
    first planned at topic version ``since``."""

    topic_id: str | None
    since: int | None
    positions: Mapping[int, int] = field(default_factory=dict)
    epoch: int | None = None  # a replicated topic's leader epoch the positions were planned under

    def moved(self, positions: Mapping[int, int], epoch: int | None = None) -> "TopicOffset":
        return TopicOffset(self.topic_id, self.since, dict(sorted(positions.items())),
                           self.epoch if epoch is None else epoch)


@dataclass(frozen=True)
class StreamOffset:
    topics: Mapping[str, TopicOffset] = field(default_factory=dict)

    def positions(self, topic: str) -> dict[int, int]:
        found = self.topics.get(topic)
        return dict(found.positions) if found else {}

    def to_json(self) -> dict:
        """The canonical JSON (as Spark stores and compares it): keys sorted, partitions as strings."""
        return {"v": FORMAT_VERSION, "topics": {
            t: {"id": o.topic_id, "since": o.since, "positions": {str(p): int(n) for p, n in sorted(o.positions.items())},
                **({"epoch": o.epoch} if o.epoch is not None else {})}
            for t, o in sorted(self.topics.items())}}

    @classmethod
    def from_json(cls, doc: Mapping | str) -> "StreamOffset":
        """An offset from its JSON (a dict, as the Python data source API passes it, or text)."""
        data = json.loads(doc) if isinstance(doc, str) else dict(doc)
        version = data.get("v")
        if version is None and "topics" in data:  # the earlier release's form
            return cls({t: TopicOffset(None, None, {int(p): int(o) for p, o in ps.items()})
                        for t, ps in data["topics"].items()})
        if version != FORMAT_VERSION:
            raise InvalidConfigurationError(
                f"this query's checkpoint holds a lakelog offset of format version {version!r}, which this release "
                f"does not read (it reads {FORMAT_VERSION}): run the query with the release that wrote it, or start "
                "it with a new checkpoint location")
        return cls({t: TopicOffset(o.get("id"), o.get("since"), {int(p): int(n) for p, n in o["positions"].items()},
                                   o.get("epoch"))
                    for t, o in data["topics"].items()})
