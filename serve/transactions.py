"""A server's side of Kafka's transactional producers, over lakelog's transaction coordinator
(``control_plane.transactions``, whose rules decide every step): Kafka's int producer ids and
epochs for the coordinator's, the coordinator's errors as Kafka's codes, which partitions a
producer may append to in its transaction, and the observer that aborts hung transactions
(docs/serve.md, Transactions).

Producer ids: a transactional id a server initialises first gets ``kafka-<n>`` (``n`` a random
62-bit int, the Kafka producer id handed to the client); its records carry that id, with no
partition suffix, so the coordinator's markers (written for the row's producer id) close them.
An id a Python producer initialised (``txn-<uuid>``) is handed a stable hash of it.

Epochs: the coordinator raises the epoch at every end of a transaction (KIP-890's bump), and moves
the id to a new producer id at epoch 0 when the epoch would pass Kafka's int16 (the rotation). A
client that learns the bump (EndTxn v5) uses the producer id and epoch answered; an older one
(Kafka's transaction version 1: EndTxn v4 and below, librdkafka) keeps those InitProducerId gave
it, which this server maps to the coordinator's they stand for now. The map is the server's
memory: after a restart such a client that had ended a transaction is fenced (it initialises
again), never taken for another."""

from __future__ import annotations

import logging
import secrets
import threading

import pyarrow as pa

from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import (
    MAX_EPOCH, InvalidTransactionStateError, TransactionRow, UnknownTransactionalIdError,
)
from log_store.errors import LOST_ROOT, ConcurrentCommitError, IllegalGenerationError, ProducerFencedError
from log_store.names import producer_app_id
from log_store.session import activate
from serve.txn_ids import kafka_producer_id  # noqa: F401 (answered from here too)

log = logging.getLogger("lakelog.serve")
KAFKA = "kafka-"
FENCED = "FENCED"  # answered PRODUCER_FENCED or INVALID_PRODUCER_EPOCH, by the request's version
FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2}  # API key -> first version answering PRODUCER_FENCED (KIP-588)
SHORTEST_LOOK = 0.05  # seconds: the observer looks no more often than this


def new_producer_id() -> str:
    return f"{KAFKA}{secrets.randbits(62) + 1}"


def transactional_rows(rows: pa.Table, entries: list, expected: dict[str, int]
                       ) -> tuple[pa.Table, dict[str, int] | None, dict[str, int] | None, dict[str, int]]:
    """An append's rows (``entries``' in order) with each transactional batch's records carried by
    its transaction's producer id, numbered after that id's mark in ``expected`` (the log keeps one
    mark per producer id and topic); its Kafka sequences, per partition as Kafka numbers them, are
    the marks of ``kafka-<n>-<partition>`` (``serve.producers``), set in the same commit. Returns
    (rows, those marks, producer id -> coordinator epoch, the transaction ids' marks after);
    ``rows`` as given and Nones when no batch is transactional."""
    if not any(e.txn is not None for e in entries):
        return rows, None, None, {}
    producers = rows.column("producer_id").to_pylist()
    sequences = rows.column("sequence").to_pylist()
    stamps: dict[str, int] = {}
    epochs: dict[str, int] = {}
    after: dict[str, int] = {}
    at = 0
    for e in entries:
        n = e.batch.count
        if e.txn is not None:
            pid, epoch = e.txn
            first = after.get(pid, expected[pid]) + 1
            producers[at:at + n] = [pid] * n
            sequences[at:at + n] = range(first, first + n)
            after[pid] = first + n - 1
            key = producer_app_id(e.producer)
            stamps[key] = max(stamps.get(key, -1), e.first + n - 1)
            epochs[pid] = epoch
        at += n
    rows = rows.set_column(rows.schema.get_field_index("producer_id"), "producer_id", pa.array(producers, pa.string()))
    rows = rows.set_column(rows.schema.get_field_index("sequence"), "sequence", pa.array(sequences, pa.int64()))
    return rows, stamps, epochs, after


def fenced_code(api_key: int, version: int) -> str:
    """Kafka's answer to a fenced producer: PRODUCER_FENCED from the version that knows it."""
    return "PRODUCER_FENCED" if version >= FENCED_FROM.get(api_key, 99) else "INVALID_PRODUCER_EPOCH"


class TxnError(Exception):
    """A transactional request answered with Kafka's ``code`` (a code name, or ``FENCED``)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


def kafka_code(exc: Exception) -> str | None:
    """The code a coordinator's refusal is answered with (None: not one of its refusals)."""
    if isinstance(exc, TxnError):
        return exc.code
    if isinstance(exc, ProducerFencedError):
        return FENCED
    if isinstance(exc, InvalidTransactionStateError):
        return "INVALID_TXN_STATE"
    if isinstance(exc, UnknownTransactionalIdError):
        return "INVALID_PRODUCER_ID_MAPPING"
    if isinstance(exc, IllegalGenerationError):
        return "ILLEGAL_GENERATION"
    if isinstance(exc, ConcurrentCommitError):
        return "CONCURRENT_TRANSACTIONS"  # other changes to the id won every try: the client retries
    if isinstance(exc, LOST_ROOT):
        return "COORDINATOR_NOT_AVAILABLE"
    return None


def _named(tid: str) -> None:
    """Kafka's coordinator answers a transactional step of an empty id INVALID_REQUEST."""
    if not tid:
        raise TxnError("INVALID_REQUEST", "a transactional id must not be empty")


class Transactions:
    """The transactional ids served here: the coordinator's calls (blocking: on the pool) and what
    the server remembers between them."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.coordinator = TransactionCoordinator(
            ctx.spark, ctx.root, new_producer_id=new_producer_id,
            history_retention_ms=ctx.settings.transaction_history_retention_ms,
            id_expiration_ms=ctx.settings.transactional_id_expiration_ms)
        self._lock = threading.Lock()
        # id -> (its client's (producer id, epoch), the coordinator's they stand for)
        self._held: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}
        self._ended: dict[str, tuple[int, int, bool]] = {}  # id -> (producer id, epoch after its last EndTxn here, committed)
        self._rows: dict[str, TransactionRow] = {}  # id -> its row as this server last recorded or read it
        self._ids: dict[int, str] = {}  # Kafka producer id -> the transactional id of a row in ``_rows``
        self._shortest: int | None = None  # the shortest transaction timeout initialised here
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the producer's steps (on the pool) ------------------------------------------------------
    def init(self, tid: str, timeout_ms: int, held_id: int = -1, held_epoch: int = -1) -> TransactionRow:
        """InitProducerId with a transactional id: the coordinator's (its ongoing transaction
        aborted, the epoch raised). A client naming the id and epoch it holds (KIP-360) must name
        the id's producer, at the coordinator's epoch, or at the one an abort (its timeout's)
        raised it from."""
        _named(tid)
        if not 0 < timeout_ms <= self.ctx.settings.transaction_max_timeout_ms:
            raise TxnError("INVALID_TRANSACTION_TIMEOUT", f"transaction timeout {timeout_ms} ms is not within "
                           f"1 .. serve.transaction_max_timeout_ms ({self.ctx.settings.transaction_max_timeout_ms})")
        if held_id != -1:
            row = self.coordinator.table.get(tid)
            if row is not None:
                pid, held = self.coordinator_ids(tid, held_id, held_epoch)
                current, last = pid == kafka_producer_id(row.producer_id), pid == kafka_producer_id(row.ended_by)
                if not (current or last):
                    self._check_id(row, pid)
                timed_out = last and row.state == TxnState.COMPLETE_ABORT and row.ended_epoch == held  # its abort's bump
                if (not current or held < row.epoch) and not row.state.deciding and not timed_out:
                    raise TxnError(FENCED, f"transactional id '{tid}' is at producer id "
                                   f"{kafka_producer_id(row.producer_id)}, epoch {row.epoch}")
        row = self._in_int16(self.coordinator.init_producer_id(tid, timeout_ms, new_producer_id))
        with self._lock:
            self._held[tid] = ((kafka_producer_id(row.producer_id), row.epoch),) * 2
            self._ended.pop(tid, None)
            self._rows[tid] = row
            self._ids[kafka_producer_id(row.producer_id)] = tid
            self._shortest = min(self._shortest or timeout_ms, timeout_ms)
        return row

    def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions: dict[str, list[int]],
                       verify_only: bool = False) -> TransactionRow:
        """AddPartitionsToTxn (``verify_only``: KIP-890's check that they are in already)."""
        _named(tid)
        row, at = self._current(tid, producer_id, epoch)
        if verify_only:
            if row.state != TxnState.ONGOING or any(set(ps) - set(row.partitions.get(t, [])) for t, ps in partitions.items()):
                raise TxnError("INVALID_TXN_STATE", "the partitions are not in the ongoing transaction")
            return row
        return self._keep(self.coordinator.add_partitions(tid, at, partitions, row=row))

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> TransactionRow:
        _named(tid)
        row, at = self._current(tid, producer_id, epoch)
        return self._keep(self.coordinator.add_offsets(tid, at, group, row=row))

    def commit_offsets(self, tid: str, producer_id: int, epoch: int, group: str, positions: dict[str, dict[int, int]],
                       generation: int, member_id: str) -> TransactionRow:
        """TxnOffsetCommit: the positions kept with the transaction (the member checked by the caller
        against the live group; the coordinator checks its generation against the group's fence)."""
        row, at = self._current(tid, producer_id, epoch)
        return self._keep(self.coordinator.txn_offset_commit(tid, at, group, positions, max(generation, 0), member_id,
                                                             row=row))

    def end(self, tid: str, producer_id: int, epoch: int, commit: bool, learns_bump: bool) -> TransactionRow:
        """EndTxn: the coordinator's decision, finished. ``learns_bump`` (v5): the client is answered
        the raised epoch and uses it; else it keeps its epoch, mapped to the raised one here."""
        _named(tid)
        row = self.coordinator.table.get(tid)
        if row is None:
            raise TxnError("INVALID_PRODUCER_ID_MAPPING", f"unknown transactional id '{tid}'")
        pid, at = self.coordinator_ids(tid, producer_id, epoch)
        if pid not in (kafka_producer_id(row.producer_id), kafka_producer_id(row.ended_by)):
            self._check_id(row, pid)
        mine = row.producer_id if pid == kafka_producer_id(row.producer_id) else row.ended_by  # a retry's, after a move
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        with self._lock:
            retried = self._ended.get(tid) == (pid, at, commit) and row.epoch == at and row.state == done
        if retried:  # the answer to an EndTxn was lost and the client sent it again
            return row
        ended = self._keep(self.coordinator.end_txn(tid, at, commit, mine, row=row))
        self._in_int16(ended)
        after = (kafka_producer_id(ended.producer_id), ended.epoch)
        with self._lock:
            self._held[tid] = (after if learns_bump else (producer_id, epoch), after)
            self._ended[tid] = (*after, commit)
        return ended

    def writer(self, tid: str, producer_id: int, epoch: int, topic: str, partition: int) -> tuple[str, int]:
        """(the lakelog producer id, the coordinator's epoch) a transactional batch to ``topic``'s
        ``partition`` is appended under: refused when the partition is not in the producer's ongoing
        transaction (INVALID_TXN_STATE) or the producer is not the id's (INVALID_PRODUCER_ID_MAPPING).
        Judged on the row as last seen here, read again before refusing; the log's epoch fence
        refuses an append of a transaction ended meanwhile (``ProducerFencedError``)."""
        producer_id, at = self.coordinator_ids(tid, producer_id, epoch)
        for fresh in (False, True):
            with self._lock:
                row = None if fresh else self._rows.get(tid)
            if row is None:
                row = self._keep(self.coordinator.table.get(tid)) if fresh else None
            if row is None:
                continue
            if (kafka_producer_id(row.producer_id) == producer_id and row.epoch == at
                    and row.state == TxnState.ONGOING and partition in row.partitions.get(topic, [])):
                added_in = row.incarnations.get(topic)
                if added_in is not None and self.coordinator.admin.incarnation(topic) != added_in:
                    # its markers go to the incarnation it was added in: records here would stay open
                    raise TxnError("INVALID_TXN_STATE", f"topic {topic} was deleted and created again since "
                                   f"'{tid}' added partition {partition}: abort the transaction and send "
                                   "again in a new one")
                return row.producer_id, at
        if row is None:
            raise TxnError("INVALID_PRODUCER_ID_MAPPING", f"unknown transactional id '{tid}'")
        self._check_id(row, producer_id)
        if at < row.epoch:
            raise TxnError("INVALID_PRODUCER_EPOCH", f"producer epoch {epoch} of '{tid}' is fenced")
        raise TxnError("INVALID_TXN_STATE", f"partition {partition} of {topic} is not in the ongoing transaction of "
                       f"'{tid}': the producer adds it first (AddPartitionsToTxn)")

    # -- what the server keeps -----------------------------------------------------------------
    def coordinator_ids(self, tid: str, producer_id: int, epoch: int) -> tuple[int, int]:
        """The coordinator's (Kafka producer id, epoch) a client's stand for (themselves, unless this
        server ended a transaction of the client's without it learning the bump or the rotation)."""
        with self._lock:
            held = self._held.get(tid)
        return held[1] if held is not None and held[0] == (producer_id, epoch) else (producer_id, epoch)

    def _current(self, tid: str, producer_id: int, epoch: int) -> tuple[TransactionRow, int]:
        """The id's row read now and the coordinator's epoch of the client's, in Kafka's order of
        checks: the producer id, the epoch, then a decision being finished (CONCURRENT_TRANSACTIONS,
        finished here first so the client's retry goes on)."""
        row = self.coordinator.table.get(tid)
        if row is None:
            raise TxnError("INVALID_PRODUCER_ID_MAPPING", f"unknown transactional id '{tid}': InitProducerId first")
        producer_id, at = self.coordinator_ids(tid, producer_id, epoch)
        self._check_id(row, producer_id)
        if at != row.epoch:
            raise TxnError(FENCED, f"producer epoch {epoch} of '{tid}' is fenced: the id is at epoch {row.epoch}")
        if row.state.deciding:
            self._keep(self.coordinator.finish(row))
            raise TxnError("CONCURRENT_TRANSACTIONS", f"the last transaction of '{tid}' is being finished; retry")
        return row, at

    @staticmethod
    def _in_int16(row: TransactionRow) -> TransactionRow:
        """``row``, whose epoch a Kafka client can hold (an int16); else refused, said plainly (the
        coordinator moves an exhausted id to a new producer id: only a row it did not raise is past)."""
        if row.epoch > MAX_EPOCH:
            raise TxnError("UNKNOWN_SERVER_ERROR", f"transactional id '{row.transactional_id}' is at epoch {row.epoch}, "
                           f"past Kafka's {MAX_EPOCH}: initialise the id again (InitProducerId) or give the producer "
                           "another transactional.id")
        return row

    @staticmethod
    def _check_id(row: TransactionRow, producer_id: int) -> None:
        if kafka_producer_id(row.producer_id) != producer_id:
            raise TxnError("INVALID_PRODUCER_ID_MAPPING", f"producer id {producer_id} is not transactional id "
                           f"'{row.transactional_id}''s ({kafka_producer_id(row.producer_id)})")

    def _keep(self, row: TransactionRow | None) -> TransactionRow | None:
        if row is not None:
            with self._lock:
                kept = self._rows.get(row.transactional_id)
                if kept is None or kept.version <= row.version:
                    self._rows[row.transactional_id] = row
                    self._ids[kafka_producer_id(row.producer_id)] = row.transactional_id
        return row

    def open_in(self, producer_id: int, topic: str, partition: int) -> bool:
        """Whether Kafka producer ``producer_id`` is a transactional id's whose ongoing transaction
        holds ``topic``'s ``partition``, as this server last saw the id's row (an id never seen here
        is not known)."""
        with self._lock:
            row = self._rows.get(self._ids.get(producer_id, ""))
        return (row is not None and row.state == TxnState.ONGOING and kafka_producer_id(row.producer_id) == producer_id
                and partition in row.partitions.get(topic, []))

    # -- the observer ----------------------------------------------------------------------------
    def interval(self) -> float:
        """Seconds between two looks for hung transactions: ``transaction_abort_interval_ms``, or a
        tenth of the shortest timeout initialised here, if less."""
        every = self.ctx.settings.transaction_abort_interval_ms
        with self._lock:
            if self._shortest is not None:
                every = min(every, self._shortest // 10)
        return max(SHORTEST_LOOK, every / 1000)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._observe, name="lakelog-serve-txn-observer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def _observe(self) -> None:
        """``coordinator.tick`` until stopped: decisions finished, transactions unchanged past their
        timeout aborted (on this server's monotonic clock; the coordinator's ``TimeoutWatch``)."""
        activate(self.ctx.spark)
        while not self._stop.wait(self.interval()):
            try:
                for row in self.coordinator.tick():
                    self._keep(row)
                    log.info("transactional id %s: %s at epoch %s by the observer", row.transactional_id,
                             row.state.value, row.epoch)
            except Exception:  # noqa: BLE001 - looked at again next time
                log.exception("looking for hung transactions failed")
