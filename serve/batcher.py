"""The group commit: every connection's batches for a topic within ``serve.linger_ms`` (or
``serve.batch_bytes``) become one fenced append, ``TopicLog.append_rows`` (docs/serve.md).

The loop thread queues batches and starts commits; each commit runs on the pool. One commit per
topic is in flight at a time; batches arriving meanwhile wait for the next. A partition's batches
of one request are queued together (a unit) and go in one commit, all or none. A commit judges each
idempotent batch against its producer's mark (``serve.batch_judge``), appends what is new in
one Delta commit, answers duplicates with the offsets they were first written at, and answers
what the log refused unit by unit: one unit's failure never fails another, and a batch once
appended is never answered with an error its retry would write again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from log_store.errors import (
    LOST_ROOT, FencedLeaderEpochError, InvalidPartitionMetadataError, LakelogError, StaleProducerSequenceError, TopicDeletedError,
    UnknownTopicError,
)
from log_store import rs_reader
from log_store.files import reads_with_delta_rs
from log_store.topic_log import TopicLog
from serve.batch_judge import BatchJudge
from serve.commit_entries import Entry, Outcome
from serve.context import ServeContext, TopicView
from serve.errors import message_of, name_of, unreachable
from serve.placement import CLIENT, base_offsets, place_records
from serve.records import rows_of
from serve.tail import pieces_of
from serve.transactions import transactional_rows
from serve.topic_limits import TopicLimits

log = logging.getLogger("lakelog.serve")
ATTEMPTS = 20  # commits of one flush refused by a resize, an election or another server's marks
VIEW_AGE = 1.0  # seconds a commit may plan on a topic's view: the append checks its metadata itself
STOP_WAIT = 30  # seconds a stopping server waits for requests being queued and commits under way


@dataclass
class _Queue:
    entries: list[Entry] = field(default_factory=list)
    bytes: int = 0
    since: float = 0.0
    timer: asyncio.TimerHandle | None = None
    committing: bool = False


class Batcher:
    """Queues per topic and the commits that empty them."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx
        self._queues: dict[str, _Queue] = {}
        self.judging = BatchJudge(ctx)  # the producers' marks and the verdict on each idempotent batch
        self.limits = TopicLimits(ctx)  # each topic's max.message.bytes, for the produce requests checked
        self._tasks: set[asyncio.Task] = set()
        self._arriving: set[asyncio.Task] = set()  # produce requests being decoded and queued
        self._views: dict[str, tuple[TopicView, float]] = {}  # topic -> (view, when read), used by commits
        self._epochs: dict[str, int | None] = {}  # topic -> the leader epoch its last view was read at
        self._placements: dict[str, str] = {}  # topic -> its placement (serve.placement), read with its view
        self._stopping = False
        self.committed = 0  # Delta commits made (for the benchmark's commits a second)
        self.on_commit = None  # called with the topic after each commit (fetches waiting on it)

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        """Queue the requests already read, commit every batch queued, and wait for the commits
        (at most ``STOP_WAIT`` seconds for each step)."""
        self._stopping = True
        if self._arriving:
            await asyncio.wait(self._arriving, timeout=STOP_WAIT)
        for topic in list(self._queues):
            self._flush(topic)
        deadline = time.monotonic() + STOP_WAIT
        while self._tasks and time.monotonic() < deadline:  # a commit flushes what queued behind it
            await asyncio.wait(self._tasks, timeout=deadline - time.monotonic())

    # -- on the loop ---------------------------------------------------------------------------
    def arriving(self, queueing: Coroutine) -> asyncio.Task:
        """Run ``queueing`` (a produce request's decoding and queueing) as a task of its own: a
        connection that closes does not cancel it, so every request read is appended (Kafka's
        broker appends every request it has read); a stopping server waits for it."""
        task = self.ctx.loop.create_task(queueing)
        self._arriving.add(task)
        task.add_done_callback(self._arriving.discard)
        return task

    def submit(self, entries: list[Entry]) -> None:
        """Queue one partition's batches of one request for their topic's next commit, together
        (called on the loop thread)."""
        if not entries:
            return
        unit = entries[0].unit
        topic = entries[0].topic
        q = self._queues.setdefault(topic, _Queue())
        if not q.entries:
            q.since = time.monotonic()
        for entry in entries:
            entry.unit = unit
            q.entries.append(entry)
            q.bytes += entry.size
        if q.committing:
            return
        if q.bytes >= self.ctx.settings.batch_bytes or self.ctx.settings.linger_ms == 0 or self._stopping:
            self._flush(topic)
        elif q.timer is None:
            q.timer = self.ctx.loop.call_later(self.ctx.settings.linger_ms / 1000, self._flush, topic)

    def _flush(self, topic: str) -> None:
        q = self._queues[topic]
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        if q.committing or not q.entries:
            return
        entries, q.entries, q.bytes, q.committing = q.entries, [], 0, True
        task = self.ctx.loop.create_task(self._commit(topic, entries))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _commit(self, topic: str, entries: list[Entry]) -> None:
        try:
            outcomes = await self.ctx.run(self.commit, topic, entries)
        except Exception as exc:  # the pool itself failed (shut down): nothing of the commit ran
            log.exception("a commit of %s could not run", topic)
            outcomes = [Outcome(error=name_of(exc), message=str(exc)[:300])] * len(entries)
        for entry, outcome in zip(entries, outcomes):
            if not entry.future.done():
                entry.future.set_result(outcome)
        q = self._queues[topic]
        q.committing = False
        if self.on_commit is not None:
            self.on_commit(topic)
        if q.entries:
            wait = self.ctx.settings.linger_ms / 1000 - (time.monotonic() - q.since)
            if wait <= 0 or q.bytes >= self.ctx.settings.batch_bytes or self._stopping:
                self._flush(topic)
            else:
                q.timer = self.ctx.loop.call_later(wait, self._flush, topic)

    # -- on the pool ---------------------------------------------------------------------------
    def commit(self, topic: str, entries: list[Entry]) -> list[Outcome]:
        """Append ``entries`` in one commit (retrying on what a retry can fix); an outcome each. An
        error nobody foresaw (a bug) is answered to the entries not yet appended, and only to them."""
        outcomes: dict[int, Outcome] = {}
        try:
            self._attempts(topic, entries, outcomes)
        except Exception as exc:  # noqa: BLE001 - each entry not yet answered is answered with it
            log.exception("a commit of %s failed", topic)
            return self._fill(entries, outcomes, Outcome(error="UNKNOWN_SERVER_ERROR",
                                                         message=f"the commit failed: {exc!r}"[:300]))
        finally:
            self.judging.producers.expire(time.monotonic())
        return self._fill(entries, outcomes, Outcome(error="REQUEST_TIMED_OUT", message="the commit kept being refused"))

    def _attempts(self, topic: str, entries: list[Entry], outcomes: dict[int, Outcome]) -> None:
        for attempt in range(ATTEMPTS):
            try:
                view = self._view(topic, fresh=attempt > 0)
            except (UnknownTopicError, TopicDeletedError) as exc:
                self._fail(entries, outcomes, Outcome(error="UNKNOWN_TOPIC_OR_PARTITION", message=str(exc)))
                return
            except LOST_ROOT as exc:  # its log's root lost: the client backs off and retries (an election ends it)
                self._fail(entries, outcomes, Outcome(error=unreachable(self.ctx.replicated(topic)), message=str(exc)))
                return
            path = view.record.location
            todo = [e for e in entries if id(e) not in outcomes]
            try:
                placed = self._place(view, todo, outcomes)
                accepted, expected = self.judging.judge(view, placed, outcomes)
            except LOST_ROOT as exc:  # the log's marks or a duplicate's record read from a lost root
                for e in todo:
                    outcomes.pop(id(e), None)
                self._refused(topic, path, entries, outcomes, exc, attempt)
                return
            if not accepted:
                self._acknowledge(view, todo, outcomes)  # retries answered as duplicates wait as well
                return
            rows, stamps, txn, after = transactional_rows(self._rows(accepted), accepted, expected)
            more = {"stamps": stamps, "transactional": txn} if txn else {}
            try:
                result = TopicLog(self.ctx.spark, path).append_rows(
                    rows, view.snapshot.metadata.undeleted_partition_count, expected, **more)
            except Exception as exc:
                # Nothing appended: what this attempt judged (duplicates, sequence refusals, places)
                # is judged again by the next on a fresh view, or answered with the failure. A
                # duplicate kept as answered would skip the wait for the replicas its first send
                # may never have reached (acks=all), or keep an answer from a history since replaced.
                for e in todo:
                    outcomes.pop(id(e), None)
                if self._refused(topic, path, entries, outcomes, exc, attempt):
                    return
                continue
            for e in accepted:  # appended: whatever fails from here on, never answered with an error
                outcomes[id(e)] = Outcome()
            self.committed += 1
            self.ctx.forget(path)
            for pid, mark in after.items():
                self.judging.producers.learned((path, pid), mark, time.monotonic())
            self._answered(view, path, accepted, result, outcomes)
            self._acknowledge(view, todo, outcomes)
            return

    def _refused(self, topic: str, path: str, entries: list[Entry], outcomes: dict[int, Outcome], exc: Exception,
                 attempt: int) -> bool:
        """An append refused (nothing appended): True once every entry not yet answered is answered
        with the refusal, False to judge them again on a fresh view. A refusal nobody foresaw is raised."""
        if isinstance(exc, StaleProducerSequenceError):  # another server committed for these producers
            for pid, mark in exc.marks.items():
                self.judging.producers.learned((path, pid), mark, time.monotonic())
            return False
        if isinstance(exc, FencedLeaderEpochError):
            self.ctx.forget(path)  # an election moving the topic: follow its record
            if attempt < ATTEMPTS - 1:
                time.sleep(min(2.0, 0.05 * 2 ** attempt))
                return False
            outcome = Outcome(error=name_of(exc), message=str(exc))
        elif isinstance(exc, LOST_ROOT):  # the leader's root lost, nothing appended: answered at once, as Kafka's
            self.ctx.forget(path)  # broker does, and the client retries after its backoff
            self._views.pop(topic, None)
            outcome = Outcome(error=unreachable(self.ctx.replicated(topic)), message=str(exc))
        elif isinstance(exc, InvalidPartitionMetadataError):
            self.ctx.forget(path)  # a resize committed meanwhile: judge again on the new metadata
            return False
        elif isinstance(exc, (UnknownTopicError, TopicDeletedError)):
            outcome = Outcome(error="UNKNOWN_TOPIC_OR_PARTITION", message=str(exc))
        elif isinstance(exc, LakelogError):
            outcome = Outcome(error=name_of(exc), message=message_of(exc))
        else:
            raise exc
        self._fail(entries, outcomes, outcome)
        return True

    def _answered(self, view: TopicView, path: str, accepted: list[Entry], result, outcomes: dict[int, Outcome]) -> None:
        """After an append: each entry's offsets, its producer's batches, the records kept in the
        tail. A failure here leaves the entries answered as appended (without their offsets)."""
        now = time.monotonic()
        for e in accepted:
            if e.producer is not None:
                self.judging.producers.appended((path, e.producer), e.first, e.first + e.batch.count - 1, now)
        try:
            self._answer(view, path, accepted, result.ranges, outcomes)
        except Exception:  # noqa: BLE001 - the records are in the log: answered as appended
            log.exception("answering a commit of %s failed; its batches are answered without offsets", path)
        self._keep(path, accepted, result)

    @staticmethod
    def _fail(entries: list[Entry], outcomes: dict[int, Outcome], outcome: Outcome) -> None:
        """Answer every entry not yet answered with ``outcome``."""
        for e in entries:
            outcomes.setdefault(id(e), outcome)

    def _view(self, topic: str, fresh: bool) -> TopicView:
        """The topic as the last commit planned on it, read again after ``VIEW_AGE`` seconds or when
        ``fresh`` (the append checks count, modes and epochs in its own transaction; a refusal makes
        the next attempt fresh). Fetches read their own, moved by each commit."""
        hit = self._views.get(topic)
        if fresh or hit is None or time.monotonic() - hit[1] > VIEW_AGE:
            hit = (self.ctx.view(topic), time.monotonic())
            self._placements[topic] = self.ctx.placement(hit[0])
            self._views[topic] = hit
            self._follow_leadership(hit[0])
        return hit[0]

    def _follow_leadership(self, view: TopicView) -> None:
        """After an election of a replicated topic, the producer marks and offsets this server keeps
        of its leader's log are read again: the same root elected again may lead another history, whose
        truncation took records and marks a retry would otherwise be answered with."""
        epoch = view.leadership.leader_epoch if view.leadership is not None else None
        if self._epochs.get(view.name, epoch) != epoch:
            self.judging.forget(view.record.location)
        self._epochs[view.name] = epoch

    @staticmethod
    def _fill(entries: list[Entry], outcomes: dict[int, Outcome], rest: Outcome) -> list[Outcome]:
        return [outcomes.get(id(e), rest) for e in entries]

    def place(self, view: TopicView, entries: list[Entry]) -> list[np.ndarray]:
        """The partition of each entry's records, under the count the append is fenced with and the
        topic's placement (``serve.placement``)."""
        count = view.snapshot.metadata.undeleted_partition_count
        writable = view.writable()
        placement = self._placements.get(view.name, self.ctx.settings.placement)
        # a transaction's records go where its producer addressed them: the partitions it added
        return [place_records(e.batch.keys.to_pylist(), e.partition, count, writable,
                              CLIENT if e.txn is not None else placement) for e in entries]

    def _place(self, view: TopicView, todo: list[Entry], outcomes: dict[int, Outcome]) -> list[Entry]:
        """``todo`` with each entry's records placed; a unit one of whose entries cannot be taken
        (a partition that never was, records the log cannot hold, a placement that failed) is
        answered as a whole, and the others go on."""
        meta = view.snapshot.metadata
        writable = view.writable()
        for e in todo:
            e.placed = None
        failed: dict[int, Outcome] = {}
        for e in todo:
            if e.unit in failed:
                continue
            if e.partition not in meta.partitions or not writable:  # a partition that never was: the client's mistake
                failed[e.unit] = Outcome(error="UNKNOWN_TOPIC_OR_PARTITION",
                                         message=f"partition {e.partition} of {view.name} does not exist")
                continue
            if e.txn is not None and e.partition not in writable:  # its records may go to no other partition
                failed[e.unit] = Outcome(error="NOT_LEADER_OR_FOLLOWER", message=f"partition {e.partition} of "
                                         f"{view.name} takes no appends now; add a writable partition")
                continue
            b = e.batch
            if not b.count or not len(b.keys) == len(b.headers) == len(b.timestamps) == b.count:
                failed[e.unit] = Outcome(error="INVALID_RECORD", message="a batch of no records, or of columns of "
                                                                         "different lengths, cannot be appended")
                continue
            try:
                e.placed = self.place(view, [e])[0]
            except Exception as exc:  # noqa: BLE001 - a bug placing one unit fails that unit alone
                log.exception("placing a batch of %s failed", view.name)
                failed[e.unit] = Outcome(error="UNKNOWN_SERVER_ERROR", message=f"placing the batch failed: {exc!r}"[:300])
        for e in todo:
            if e.unit in failed:
                outcomes[id(e)] = failed[e.unit]
        return [e for e in todo if e.unit not in failed]

    @staticmethod
    def _rows(accepted: list[Entry]) -> pa.Table:
        """The rows of the placed ``accepted`` entries, with their producers' sequences."""
        records = rows_of([e.batch for e in accepted])
        counts = [e.batch.count for e in accepted]
        partitions = np.concatenate([e.placed for e in accepted])
        producers = pa.array(np.repeat(np.array([e.producer for e in accepted], dtype=object), counts), pa.string())
        firsts = np.repeat(np.array([e.first for e in accepted], dtype=np.int64), counts)
        starts = np.repeat(np.cumsum([0] + counts[:-1]), counts)
        sequences = firsts + (np.arange(len(firsts)) - starts)
        sequences = pa.array(sequences, pa.int64(), mask=np.repeat([e.producer is None for e in accepted], counts))
        return records.append_column("partition", pa.array(partitions)).append_column(
            "producer_id", producers).append_column("sequence", sequences)

    def _answer(self, view: TopicView, path: str, accepted: list[Entry], ranges: dict[int, tuple[int, int]],
                outcomes: dict[int, Outcome]) -> None:
        """Each appended entry's base offset (``serve.placement.base_offsets``): its first record's,
        numbered after the rows queued before it in that partition, when the whole batch is where the
        client addressed it, else -1 (unknown): a client numbers its records from it there."""
        starts = view.snapshot.earliest_offsets()
        placed = [e.placed for e in accepted]
        for e, base in zip(accepted, base_offsets(placed, [e.partition for e in accepted], ranges)):
            outcomes[id(e)] = Outcome(base_offset=base, log_start=starts.get(e.partition, 0))
            if e.producer is not None:
                self.judging.remember((path, e.producer, e.first), base)

    def _keep(self, path: str, accepted: list[Entry], result) -> None:
        """Keep the committed records in the server's tail (serve/tail.py), for fetches near the log end."""
        if result.version is None:
            return
        try:
            pieces = pieces_of(result.written, [e.batch for e in accepted], [e.placed for e in accepted],
                               [e.partition for e in accepted], wire_ok=not result.log_append_time)
            follow = (lambda a, b: rs_reader.only_appends(path, a, b)) if reads_with_delta_rs(path) else None
            self.ctx.tail.committed(path, result.table_id, result.version, pieces, follow)
        except Exception:  # the commit stands; fetches read its files
            log.exception("keeping a commit of %s in memory failed", path)
            self.ctx.tail.forget(path)

    def _acknowledge(self, view: TopicView, entries: list[Entry], outcomes: dict[int, Outcome]) -> None:
        """acks=all on a replicated topic: answered once every in-sync root holds the records, under
        the leader epoch the view was read at. A retry answered as a duplicate waits too (its first
        send may have been appended and not copied), as Kafka's leader holds a duplicate's answer
        until the high watermark passes it. A wait that fails unforeseen is NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        the records are in the log, not known to be copied."""
        waiting = [e for e in entries if e.acks == -1 and outcomes.get(id(e), Outcome(error="?")).error == "NONE"]
        if not waiting:
            return
        try:
            if not self.ctx.replicated(view.name):
                return
            epoch = view.leadership.leader_epoch if view.leadership is not None else -1
            self.ctx.replication().acknowledge(view.name, view.record.location, self.ctx.settings.min_insync_replicas,
                                               epoch)
        except Exception as exc:  # noqa: BLE001 - each waiting batch is answered with it
            if not isinstance(exc, LakelogError):
                log.exception("waiting for the replicas of %s failed", view.name)
            self._views.pop(view.name, None)  # an election since the view: the next request reads it again
            code = name_of(exc) if isinstance(exc, LakelogError) else "NOT_ENOUGH_REPLICAS"
            code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND" if code == "NOT_ENOUGH_REPLICAS" else code
            for e in waiting:
                outcomes[id(e)] = Outcome(error=code, message=str(exc))
