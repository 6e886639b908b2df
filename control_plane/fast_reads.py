"""``topics list`` and ``topics describe`` without starting Spark (delta-rs reads the tables).

The answers are built by the same code as ``TopicAdmin``'s (``TopicImage`` over the records,
``describe_topic`` over a log snapshot); only the reader differs. ``tests/control_plane/
test_fast_reads.py`` checks that both readers agree.
"""

from __future__ import annotations

from control_plane.image import TopicImage
from control_plane.layout import RootLayout
from control_plane.records import TopicEvent, TopicRecord
from control_plane.topics import TopicDescription, describe_topic, live_record
from log_store import rs_reader


class FastTopicReader:
    """Read-only topic views of one root, JVM-free."""

    def __init__(self, root: str) -> None:
        self.layout = RootLayout(root)

    def images(self) -> dict[str, TopicImage]:
        records: dict[str, list[TopicRecord]] = {}
        for row in rs_reader.rows(self.layout.control("topics")):
            record = TopicRecord.model_validate(row)
            records.setdefault(record.topic, []).append(record)
        return {t: TopicImage(t, rs) for t, rs in records.items()}

    def list(self) -> list[TopicRecord]:
        """As ``TopicAdmin.list``: live topics and those being deleted."""
        latest = [img.latest for img in self.images().values()]
        return sorted((r for r in latest if r.event is not TopicEvent.DELETED), key=lambda r: r.topic)

    def describe(self, topic: str) -> TopicDescription:
        image = self.images().get(topic)
        record = live_record(image.latest if image else None, topic, self.layout.root)
        snap, topic_id = rs_reader.log_snapshot(record.location)
        return describe_topic(record, snap, topic_id)
