"""The verdict on each idempotent batch of a group commit: appended after its producer's mark,
answered as the duplicate of a batch written before, or refused (``serve.producers.judge``). Kept
with the marks and offsets this server remembers, which are what make the verdicts cheap."""

from __future__ import annotations

import time
from collections import OrderedDict

from serve.commit_entries import Entry, Outcome, by_unit
from serve.context import ServeContext, TopicView
from serve.placement import UNKNOWN
from serve.producers import BATCHES_KEPT, NO_PRODUCER, ProducerStates, judge, lakelog_producer_id

RECENT = 100_000  # batches remembered for answering duplicates without reading the log


class BatchJudge:
    """Judges a commit's batches against the producers' marks, this server's or the log's."""

    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx
        self.producers = ProducerStates(ctx.settings.producer_id_expiration_ms)
        self.recent: OrderedDict[tuple[str, str, int], int] = OrderedDict()  # (path, producer, first) -> offset

    def forget(self, path: str) -> None:
        """Forget the marks and offsets kept of the log at ``path`` (another history may lead it now)."""
        self.producers.forget(path)
        for key in [k for k in self.recent if k[0] == path]:
            del self.recent[key]

    def judge(self, view: TopicView, todo: list[Entry], outcomes: dict[int, Outcome]) -> tuple[list[Entry], dict[str, int]]:
        """The entries to append now, and the mark each producer's rows are numbered after; the
        others get their outcome (a duplicate, a sequence error). A unit is appended all or none:
        one of its batches refused refuses the unit's others (with the first refusal), and the
        producers' running marks go back to where they were before it. A refusal judged on a mark
        from this server's memory is judged again on the log's: another server may have written
        for the producer since (its partition's leader moved there and back)."""
        path = view.record.location
        known, remembered = self._read_marks(path, todo)
        accepted, expected, judged, doubtful = self._verdicts(path, todo, known, remembered)
        if doubtful:  # the log's marks, where they moved past memory (the last batches known no more)
            now = time.monotonic()
            moved = {pid: mark for pid, mark in self.ctx.producer_marks(path, sorted(doubtful)).items()
                     if mark != known[pid][0]}
            for pid, mark in moved.items():
                self.producers.learned((path, pid), mark, now)
                known[pid] = (mark, None)
            if moved:
                accepted, expected, judged, _ = self._verdicts(path, todo, known, set())
        outcomes.update(judged)
        return accepted, expected

    def _verdicts(self, path: str, todo: list[Entry], known: dict[str, tuple[int, list | None]], remembered: set[str]
                  ) -> tuple[list[Entry], dict[str, int], dict[int, Outcome], set[str]]:
        """``judge``'s pass over ``todo`` with the marks ``known``: (accepted, expected, the others'
        outcomes, the producers from ``remembered`` whose units were refused)."""
        accepted: list[Entry] = []
        expected: dict[str, int] = {}
        judged: dict[int, Outcome] = {}
        doubtful: set[str] = set()
        running: dict[str, tuple[int, list | None]] = {}  # pid -> (mark, its last batches, None: not known)
        for unit in by_unit(todo):
            before, kept, verdicts, refused = dict(running), dict(expected), [], None
            for e in unit:
                if e.batch.producer_id == NO_PRODUCER:
                    verdicts.append((e, None))
                    continue
                pid = lakelog_producer_id(e.batch.producer_id, e.partition)
                e.producer = pid
                if pid not in running:
                    running[pid] = known[pid]
                mark, recent = running[pid]
                verdict = judge(mark, e.batch.producer_epoch, e.batch.base_sequence, e.batch.count, recent)
                if verdict.appends:
                    expected.setdefault(pid, mark)
                    if e.txn is not None:  # its rows are numbered after the transaction's producer's mark
                        expected.setdefault(e.txn[0], known[e.txn[0]][0])
                    e.first = verdict.first
                    last = verdict.first + e.batch.count - 1
                    running[pid] = (last, None if recent is None or mark != e.first - 1
                                    else [*recent, (e.first, last)][-BATCHES_KEPT:])
                    verdicts.append((e, None))
                elif verdict.kind == "duplicate":
                    verdicts.append((e, self.duplicate(path, pid, verdict.first, e)))
                else:
                    doubtful |= {pid} & remembered
                    refused = refused or Outcome(
                        error=verdict.error, message=f"producer {e.batch.producer_id} epoch {e.batch.producer_epoch} "
                        f"sequence {e.batch.base_sequence} on partition {e.partition}: {verdict.error}")
            if refused is not None:
                running, expected = before, kept
                for e in unit:
                    judged[id(e)] = refused
                continue
            for e, outcome in verdicts:
                if outcome is None:
                    accepted.append(e)
                else:
                    judged[id(e)] = outcome
        return accepted, expected, judged, doubtful


    def _read_marks(self, path: str, entries: list[Entry]) -> tuple[dict[str, tuple[int, list | None]], set[str]]:
        """(mark, last batches) of each producer of ``entries``: as this server last saw them (the
        append checks the marks), or, for those it does not know (never met, or forgotten once
        idle), the log's marks, read in one read; and which of them came from memory."""
        pids = {lakelog_producer_id(e.batch.producer_id, e.partition) for e in entries if e.batch.producer_id != NO_PRODUCER}
        pids |= {e.txn[0] for e in entries if e.txn is not None}
        now = time.monotonic()
        found = {pid: state for (_path, pid), state in self.producers.known([(path, p) for p in pids], now).items()}
        remembered = set(found)
        new = [pid for pid in pids if pid not in found]
        if new:
            for pid, mark in self.ctx.producer_marks(path, new).items():
                self.producers.learned((path, pid), mark, now)
                found[pid] = (mark, None)
        return found, remembered

    def duplicate(self, path: str, pid: str, first: int, entry: Entry) -> Outcome:
        """A retried batch: answered as its first send was, with the offset its first record was
        written at if the whole batch is at consecutive offsets of the partition addressed, else -1."""
        offset = self.recent.get((path, pid, first))
        if offset is None:
            found = self.ctx.record_of(path, pid, first)
            if found is None:  # written, but no longer in the log (retention): Kafka's answer for it
                return Outcome(error="DUPLICATE_SEQUENCE_NUMBER")
            partition, offset = found
            last = found if entry.batch.count == 1 else self.ctx.record_of(path, pid, first + entry.batch.count - 1)
            if partition != entry.partition or last != (partition, offset + entry.batch.count - 1):
                offset = UNKNOWN
        return Outcome(base_offset=offset)

    def remember(self, key: tuple[str, str, int], offset: int) -> None:
        self.recent[key] = offset
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)
