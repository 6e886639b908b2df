"""What a stream skipped, decided on the driver and reported or failed on as Spark's Kafka source
does (its ``reportDataLoss``): a topic deleted and created again, records retired or deleted
before the stream delivered them, a replicated topic's history cut by an election. Under
``failOnDataLoss`` (the default) an error; else a warning, and with a ``group`` the ranges are
reported expired in the group's tables."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from control_plane.fast_reads import FastTopicReader
from control_plane.group.offsets import unreported_expiry
from control_plane.records import ExpiredRange
from log_store import rs_reader
from pipelines.spark.offsets import TopicOffset
from pipelines.spark.options import SourceOptions
from pipelines.spark.reading import DataLossError

if TYPE_CHECKING:
    from pipelines.spark.planner import TopicNow

_log = logging.getLogger("lakelog.spark")

Positions = dict[int, int]


def member_id(group: str) -> str:
    """The member id a stream's group commits and reports under."""
    return f"stream:{group}"


class Losses:
    """A stream's data loss: ``report`` decides, the rest finds what was lost."""

    def __init__(self, root: str, opts: SourceOptions, session: Callable, reader: FastTopicReader,
                 storage: rs_reader.Storage) -> None:
        """``session``: returns the driver's Spark session (a group's reports)."""
        self.root, self.opts, self._session, self.reader, self.storage = root, opts, session, reader, storage

    def report(self, topic: str, why: str, lost: list[ExpiredRange], advice: str | None = None) -> None:
        """Records the stream was to deliver are gone (``why``; ``lost``: the ranges, where known;
        ``advice``: what to do, where it is not to restart later). Under ``failOnDataLoss`` (the
        default) an error; else a warning, and with a ``group`` the ranges are reported expired in
        the group's tables at once, before any offset past them is returned: a driver that dies
        next restarts with the report made."""
        named = ", ".join(f"partition {r.partition} offsets {r.first}-{r.end - 1}" for r in lost)
        what = f"topic '{topic}': {why}" + (f" ({named})" if named else "")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}; " + (advice or "restart from later offsets (or with a new checkpoint), or "
                                               "set failOnDataLoss to false to skip them with a warning"))
        _log.warning("%s (failOnDataLoss=false: skipped)", what)
        if lost and self.opts.group:
            from control_plane.group.offsets import GroupOffsets

            GroupOffsets(self._session(), self.root).report_expired(self.opts.group, lost,
                                                                   member_id=member_id(self.opts.group))

    def reported(self, topic: str) -> set[tuple[int, int]]:
        """(partition, end) of the ranges the stream's group already reported expired on ``topic``."""
        if not self.opts.group:
            return set()
        from control_plane.group.offsets import GroupOffsets

        return GroupOffsets(self._session(), self.root).expired(self.opts.group, topic)

    def account(self, topic: str, now: TopicNow, had: TopicOffset | None) -> TopicOffset:
        """``had`` (the stream's offset on ``topic``) checked against the topic now: the same
        incarnation, and nothing it had not delivered gone (retired, or below the log start), or
        the loss reported (``report``). A new topic, or a new incarnation once its loss is
        reported, starts at its first offsets."""
        if had is not None and had.topic_id is not None and had.topic_id != now.topic_id:
            self.report(topic, f"the topic was deleted and created again since this query last read it "
                                    f"(incarnation {had.topic_id}, now {now.topic_id}); the records of the old "
                                    "one after the query's offsets were never delivered, and the new one is read "
                                    "from its first offsets", [])
            had = None
        since = had.since if had is not None and had.since is not None else now.snap.topic_version
        positions = dict(had.positions) if had is not None else {}
        if had is not None and now.history:
            positions = self._diverged(topic, now, had, positions)
        snap = now.snap
        lost = unreported_expiry(topic, snap, sorted(positions), positions,
                                 lambda: now.image.retired_between(-1, snap.topic_version),
                                 lambda: self.reported(topic),
                                 retired_since=lambda: now.image.retired_between(since, snap.topic_version))
        if lost:
            self.report(topic, "records were retired or deleted (retention, delete-records) before this read "
                                    "delivered them", lost)
        # the epoch positions were planned under stays until they move (a position that stood still
        # through an election that cut the history was read before it)
        kept = had is not None and had.epoch is not None and positions == dict(had.positions)
        return TopicOffset(now.topic_id, since, positions, had.epoch if kept else now.epoch)

    def _diverged(self, topic: str, now: TopicNow, had: TopicOffset, positions: Positions) -> Positions:
        """Kafka's divergence check of a replicated topic's positions: after an election that
        started its epoch below a position (an unclean one, or a root back from an older copy
        elected again), a position past where it cut the history the stream read (``had.epoch``;
        unknown: the leader's log end, not the high watermark, which may step back below a
        position while nothing is lost) is data loss (``report``); without failOnDataLoss the
        stream goes back there. Pure arithmetic on the history the planner read already."""
        from control_plane.records import ReplicaEvent
        from control_plane.replication import rules

        if not any(s.event == ReplicaEvent.ELECT for s in now.history):
            return positions
        out = dict(positions)
        ends = now.leader_ends if now.leader_ends is not None else now.snap.log_ends
        for p, pos in sorted(positions.items()):
            cut = (ends.get(p, pos) if had.epoch is None
                   else rules.cut_below(list(now.history), had.epoch, p))
            back = rules.divergence(pos, cut)
            if back is not None:
                self.report(topic, f"an election cut partition {p} at offset {back}, below this query's "
                                        f"offset {pos}: the records it delivered from {back} on are not the topic's "
                                        f"any more, and those at those offsets now are new; the query goes back to {back}",
                                 [])
                out[p] = back
        return out

    def cut(self, topic: str, had: TopicOffset | None, partition: int, stop: int) -> int:
        """Where an election cut ``partition``'s history after the epoch ``had`` was read
        under: a batch that went back there (``_diverged``) reads from it (``stop`` if none)."""
        from control_plane.replication import rules
        from control_plane.replication.state import states_of

        rows = rs_reader.rows(self.reader.layout.control("topic_replicas"), storage=self.storage)
        image = self.reader.images().get(topic)
        incarnation = image.records[0].topic_version if image and image.records else 0
        history = sorted((st for st in states_of(rows) if st.topic == topic and st.incarnation == incarnation),
                         key=lambda st: st.replica_version)
        cut = rules.cut_below(history, had.epoch, partition) if had is not None and had.epoch is not None else None
        return stop if cut is None else min(cut, stop)
