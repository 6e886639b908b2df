"""A topic's history replayed once (Kafka's KRaft image): its records, its state at any version,
and what each record changed, for everyone who reads the history.

The ``topics`` control table holds one row per change, each the whole topic after it. The
controller (the latest record, the compare-and-set winner), the consumers' gates and key
compaction (the resizes in force, ``barriers``), the group members (retirements to report), the audit (retired numbers) and the timeline
(a picture of every change) all read the same replay from here, so "what did record N change"
has one answer. Pure: no Spark; ``TopicAdmin.image`` reads the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from control_plane.records import PartitionState, TopicEvent, TopicRecord
from log_store.key_order import Barrier
from log_store.log_metadata import Mode


@dataclass(frozen=True)
class Change:
    """What one record changed against the one before it, partition by partition."""

    record: TopicRecord
    added: list[int] = field(default_factory=list)  # became live: a new number, or a retired one reused
    marked: list[int] = field(default_factory=list)  # ReadWrite -> ReadOnly (marked for deletion)
    retired: list[PartitionState] = field(default_factory=list)  # -> mode None, each with its final end
    epochs: dict[int, int] = field(default_factory=dict)  # partitions whose epoch it set: the new epoch

    @property
    def version(self) -> int:
        return self.record.topic_version


def _change(prev: TopicRecord | None, cur: TopicRecord) -> Change:
    was = {p.partition: p for p in prev.partitions} if prev else {}
    now = {p.partition: p for p in cur.partitions}
    return Change(
        record=cur,
        added=sorted(q for q, p in now.items() if p.mode is not Mode.NONE and (q not in was or was[q].mode is Mode.NONE)),
        marked=sorted(q for q, p in now.items() if p.mode is Mode.READ_ONLY and q in was and was[q].mode is Mode.READ_WRITE),
        retired=[p for q, p in sorted(now.items()) if p.mode is Mode.NONE and q in was and was[q].mode is not Mode.NONE],
        epochs={q: p.leader_epoch for q, p in sorted(now.items()) if q not in was or was[q].leader_epoch != p.leader_epoch},
    )


class TopicImage:
    """One topic's records, oldest first, and what follows from them."""

    def __init__(self, topic: str, records: Iterable[TopicRecord]) -> None:
        self.topic = topic
        # Every record, and those of the current incarnation: a topic deleted and created again
        # is a new topic, whose resizes and retirements are its own (the gates, the members and
        # the audit read ``records``; the timeline reads ``history``).
        self.history: list[TopicRecord] = sorted(records, key=lambda r: r.topic_version)
        created = [i for i, r in enumerate(self.history) if r.event is TopicEvent.CREATE]
        self.records: list[TopicRecord] = self.history[created[-1]:] if created else self.history
        self._changes: list[Change] | None = None

    def __bool__(self) -> bool:
        return bool(self.records)

    @property
    def latest(self) -> TopicRecord | None:
        return self.records[-1] if self.records else None

    @property
    def version(self) -> int:
        """The latest record's version (0 if the topic has none)."""
        return self.records[-1].topic_version if self.records else 0

    def record(self, version: int) -> TopicRecord | None:
        return next((r for r in self.records if r.topic_version == version), None)

    def at(self, version: int) -> "TopicImage":
        """The image as of ``version`` (the records up to it)."""
        if version >= self.version:
            return self
        return TopicImage(self.topic, [r for r in self.history if r.topic_version <= version])

    def starts_at(self, version: int) -> dict[int, int]:
        """The first offset of each partition live at ``version`` (of this incarnation of the
        topic): where a reader planned at that version begins a partition it has not read."""
        if not self.records or version < self.records[0].topic_version:
            return {}
        then = self.at(version).latest
        return {p.partition: p.start_offset for p in then.partitions if p.mode is not Mode.NONE} if then else {}

    def view_start(self, planned: Iterable[int]) -> int | None:
        """Where a group's view of this incarnation of the topic begins: the first of ``planned``
        (the topic versions its generations planned with, oldest first) at or after the
        incarnation's creation; None if no generation saw it. Versions run on across a delete and
        create again, so a generation of the topic deleted since does not count: its retirements
        were another topic's."""
        created = self.records[0].topic_version if self.records else 0
        return next((v for v in planned if v >= created), None)

    def changes(self) -> list[Change]:
        """What each record changed, oldest first (the first record: everything it created)."""
        if self._changes is None:
            prevs: list[TopicRecord | None] = [None, *self.records[:-1]]
            self._changes = [_change(prev, cur) for prev, cur in zip(prevs, self.records)]
        return self._changes

    def retired_between(self, after: int, upto: int) -> list[tuple[int, int, int]]:
        """Partition incarnations (partition, start, end) retired by a record with a version in
        (``after``, ``upto``]."""
        return [(p.partition, p.start_offset, p.end_offset) for c in self.changes() if after < c.version <= upto
                for p in c.retired if p.end_offset is not None]

    def ever_retired(self) -> set[int]:
        """Partition numbers any record shows retired."""
        return {p.partition for r in self.records for p in r.partitions if p.mode is Mode.NONE or p.retired_at}

    def barriers(self) -> list[Barrier]:
        """The resizes in the history, each pruned of the partition incarnations a later record
        retired (``log_store.key_order``)."""
        out: list[Barrier] = []
        for change in self.changes()[1:]:
            now = {p.partition: p for p in change.record.partitions}
            if change.record.event is TopicEvent.EXPAND:
                created = [now[q] for q in change.added if now[q].epoch_after_creation]
                if created:
                    out.append(Barrier(version=change.version, before=dict(created[0].epoch_after_creation)))
            elif change.record.event is TopicEvent.MARK_DELETION and change.marked:
                out.append(Barrier(version=change.version, before=dict(now[change.marked[0]].epoch_before_deletion),
                                   marked=list(change.marked)))
            elif change.record.event is TopicEvent.RETIRE:
                gone = {p.partition for p in change.retired}
                out = [b.model_copy(update={"before": {p: e for p, e in b.before.items() if p not in gone},
                                            "marked": [m for m in b.marked if m not in gone]}) for b in out]
        return out
