"""The group commit: every connection's batches for a topic within ``serve.linger_ms`` (or
``serve.batch_bytes``) become one fenced append, ``TopicLog.append_rows`` (docs/serve.md).

The loop thread queues batches and starts commits; each commit runs on the pool. One commit per
topic is in flight at a time; batches arriving meanwhile wait for the next. A commit judges each
idempotent batch against its producer's mark (``serve.producers.judge``), appends what is new in
one Delta commit, answers duplicates with the offsets they were first written at, and answers
what the log refused batch by batch, so one bad batch never fails the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
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
from serve.context import ServeContext, TopicView
from serve.errors import message_of, name_of, unreachable
from serve.placement import UNKNOWN, base_offsets, place_records
from serve.producers import NO_PRODUCER, judge, lakelog_producer_id
from serve.records import ProducedBatch, rows_of
from serve.tail import pieces_of

log = logging.getLogger("lakelog.serve")
ATTEMPTS = 20  # commits of one flush refused by a resize, an election or another server's marks
VIEW_AGE = 1.0  # seconds a commit may plan on a topic's view: the append checks its metadata itself
RECENT = 100_000  # batches remembered for answering duplicates without reading the log


@dataclass(frozen=True)
class Outcome:
    """How one partition's batch of a produce request is answered."""

    error: str = "NONE"
    base_offset: int = -1
    log_start: int = -1
    message: str | None = None


@dataclass(eq=False)
class Entry:
    """One batch waiting for its topic's next commit."""

    topic: str
    partition: int
    batch: ProducedBatch
    acks: int
    future: asyncio.Future
    producer: str | None = None  # the lakelog producer id of an idempotent batch
    first: int = -1  # its first sequence value, once judged
    size: int = 0
    placed: np.ndarray | None = None  # the partition of each record, as the last attempt placed them


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
        self._marks: dict[tuple[str, str], int] = {}  # (log path, producer id) -> its mark as last seen
        self._recent: OrderedDict[tuple[str, str, int], int] = OrderedDict()  # (path, producer, first) -> offset
        self._tasks: set[asyncio.Task] = set()
        self._views: dict[str, tuple[TopicView, float]] = {}  # topic -> (view, when read), used by commits
        self._epochs: dict[str, int | None] = {}  # topic -> the leader epoch its last view was read at
        self._placements: dict[str, str] = {}  # topic -> its placement (serve.placement), read with its view
        self.committed = 0  # Delta commits made (for the benchmark's commits a second)
        self.on_commit = None  # called with the topic after each commit (fetches waiting on it)

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        for q in self._queues.values():
            if q.timer:
                q.timer.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=30)

    # -- on the loop ---------------------------------------------------------------------------
    def submit(self, entry: Entry) -> None:
        """Queue ``entry`` for its topic's next commit (called on the loop thread)."""
        q = self._queues.setdefault(entry.topic, _Queue())
        if not q.entries:
            q.since = time.monotonic()
        q.entries.append(entry)
        q.bytes += entry.size
        if q.committing:
            return
        if q.bytes >= self.ctx.settings.batch_bytes or self.ctx.settings.linger_ms == 0:
            self._flush(entry.topic)
        elif q.timer is None:
            q.timer = self.ctx.loop.call_later(self.ctx.settings.linger_ms / 1000, self._flush, entry.topic)

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
        except Exception as exc:  # a bug or a lost JVM: every batch of the commit is answered with it
            log.exception("a commit of %s failed", topic)
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
            if wait <= 0 or q.bytes >= self.ctx.settings.batch_bytes:
                self._flush(topic)
            else:
                q.timer = self.ctx.loop.call_later(wait, self._flush, topic)

    # -- on the pool ---------------------------------------------------------------------------
    def commit(self, topic: str, entries: list[Entry]) -> list[Outcome]:
        """Append ``entries`` in one commit (retrying on what a retry can fix); an outcome each."""
        outcomes: dict[int, Outcome] = {}
        for attempt in range(ATTEMPTS):
            try:
                view = self._view(topic, fresh=attempt > 0)
            except (UnknownTopicError, TopicDeletedError) as exc:
                return [Outcome(error="UNKNOWN_TOPIC_OR_PARTITION", message=str(exc))] * len(entries)
            except LOST_ROOT as exc:  # its log's root lost: the client backs off and retries (an election ends it)
                return [Outcome(error=unreachable(self.ctx.replicated(topic)), message=str(exc))] * len(entries)
            path = view.record.location
            todo = [e for e in entries if id(e) not in outcomes]
            accepted, expected = self._judge(view, todo, outcomes)
            if not accepted:
                self._acknowledge(view, todo, outcomes)  # retries answered as duplicates wait as well
                break
            try:
                result = TopicLog(self.ctx.spark, path).append_rows(
                    self._rows(view, accepted), view.snapshot.metadata.undeleted_partition_count, expected)
            except StaleProducerSequenceError as exc:  # another server committed for these producers
                for pid, mark in exc.marks.items():
                    self._marks[(path, pid)] = mark
                continue
            except FencedLeaderEpochError as exc:
                self.ctx.forget(path)  # an election moving the topic: follow its record
                if attempt == ATTEMPTS - 1:
                    return self._fill(entries, outcomes, Outcome(error=name_of(exc), message=str(exc)))
                time.sleep(min(2.0, 0.05 * 2 ** attempt))
                continue
            except LOST_ROOT as exc:  # the leader's root lost, nothing appended: answered at once, as Kafka's
                self.ctx.forget(path)  # broker does, and the client retries after its backoff
                self._views.pop(topic, None)
                return self._fill(entries, outcomes, Outcome(error=unreachable(self.ctx.replicated(topic)),
                                                             message=str(exc)))
            except InvalidPartitionMetadataError:
                self.ctx.forget(path)  # a resize committed meanwhile: judge again on the new metadata
                continue
            except (UnknownTopicError, TopicDeletedError) as exc:
                return self._fill(entries, outcomes, Outcome(error="UNKNOWN_TOPIC_OR_PARTITION", message=str(exc)))
            except LakelogError as exc:
                return self._fill(entries, outcomes, Outcome(error=name_of(exc), message=message_of(exc)))
            self.committed += 1
            self.ctx.forget(path)
            self._answer(view, path, accepted, result.ranges, outcomes)
            self._keep(path, accepted, result)
            self._acknowledge(view, todo, outcomes)
            break
        return self._fill(entries, outcomes, Outcome(error="REQUEST_TIMED_OUT", message="the commit kept being refused"))

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
            path = view.record.location
            for key in [k for k in self._marks if k[0] == path]:
                del self._marks[key]
            for key in [k for k in self._recent if k[0] == path]:
                del self._recent[key]
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
        return [place_records(e.batch.keys.to_pylist(), e.partition, count, writable, placement) for e in entries]

    def _judge(self, view: TopicView, todo: list[Entry], outcomes: dict[int, Outcome]) -> tuple[list[Entry], dict[str, int]]:
        """The entries to append now, and the mark each producer's rows are numbered after; the
        others get their outcome (a partition not writable, a duplicate, a sequence error)."""
        meta = view.snapshot.metadata
        writable = set(view.writable())
        path = view.record.location
        accepted: list[Entry] = []
        expected: dict[str, int] = {}
        running: dict[str, int] = {}
        self._read_marks(path, [e for e in todo if e.partition in meta.partitions and writable])
        for e in todo:
            if e.partition not in meta.partitions or not writable:  # a partition that never was: the client's mistake
                outcomes[id(e)] = Outcome(error="UNKNOWN_TOPIC_OR_PARTITION",
                                          message=f"partition {e.partition} of {view.name} does not exist")
                continue
            if e.batch.producer_id == NO_PRODUCER:
                accepted.append(e)
                continue
            pid = lakelog_producer_id(e.batch.producer_id, e.partition)
            e.producer = pid
            if pid not in running:
                running[pid] = self._marks[(path, pid)]
            verdict = judge(running[pid], e.batch.producer_epoch, e.batch.base_sequence, e.batch.count)
            if verdict.appends:
                expected.setdefault(pid, running[pid])
                e.first = verdict.first
                running[pid] = verdict.first + e.batch.count - 1
                accepted.append(e)
            elif verdict.kind == "duplicate":
                outcomes[id(e)] = self._duplicate(path, pid, verdict.first, e)
            else:
                outcomes[id(e)] = Outcome(error=verdict.error, message=f"producer {e.batch.producer_id} epoch "
                                          f"{e.batch.producer_epoch} sequence {e.batch.base_sequence} on partition "
                                          f"{e.partition}: {verdict.error}")
        return accepted, expected

    def _rows(self, view: TopicView, accepted: list[Entry]) -> pa.Table:
        records = rows_of([e.batch for e in accepted])
        counts = [e.batch.count for e in accepted]
        for e, parts in zip(accepted, self.place(view, accepted)):
            e.placed = parts
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
                self._marks[(path, e.producer)] = e.first + e.batch.count - 1
                self._remember((path, e.producer, e.first), base)

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
        until the high watermark passes it."""
        waiting = [e for e in entries if e.acks == -1 and outcomes.get(id(e), Outcome(error="?")).error == "NONE"]
        if not waiting or not self.ctx.replicated(view.name):
            return
        epoch = view.leadership.leader_epoch if view.leadership is not None else -1
        try:
            self.ctx.replication().acknowledge(view.name, view.record.location, self.ctx.settings.min_insync_replicas,
                                               epoch)
        except LakelogError as exc:
            self._views.pop(view.name, None)  # an election since the view: the next request reads it again
            code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND" if name_of(exc) == "NOT_ENOUGH_REPLICAS" else name_of(exc)
            for e in waiting:
                outcomes[id(e)] = Outcome(error=code, message=str(exc))

    def _read_marks(self, path: str, entries: list[Entry]) -> None:
        """The marks of the producers of ``entries`` this server has not seen yet, read from the log
        in one read; the others stay as this server last saw them (the append checks them all)."""
        new = {lakelog_producer_id(e.batch.producer_id, e.partition) for e in entries if e.batch.producer_id != NO_PRODUCER}
        new = [pid for pid in new if (path, pid) not in self._marks]
        if new:
            for pid, mark in self.ctx.producer_marks(path, new).items():
                self._marks[(path, pid)] = mark

    def _duplicate(self, path: str, pid: str, first: int, entry: Entry) -> Outcome:
        """A retried batch: answered as its first send was, with the offset its first record was
        written at if the whole batch is at consecutive offsets of the partition addressed, else -1."""
        offset = self._recent.get((path, pid, first))
        if offset is None:
            found = self.ctx.record_of(path, pid, first)
            if found is None:  # written, but no longer in the log (retention): Kafka's answer for it
                return Outcome(error="DUPLICATE_SEQUENCE_NUMBER")
            partition, offset = found
            last = found if entry.batch.count == 1 else self.ctx.record_of(path, pid, first + entry.batch.count - 1)
            if partition != entry.partition or last != (partition, offset + entry.batch.count - 1):
                offset = UNKNOWN
        return Outcome(base_offset=offset)

    def _remember(self, key: tuple[str, str, int], offset: int) -> None:
        self._recent[key] = offset
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)
