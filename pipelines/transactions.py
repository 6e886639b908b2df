"""Transactions on the producer, as Kafka's transactional producer makes them:

    with producer.transaction(transactional_id="etl-1") as txn:
        txn.send(rows)                       # the producer's topic
        txn.send(more, topic="other")        # any other topic of the root
        txn.send_offsets("g", {"in": {0: 42}})
    # committed here; an exception in the block aborts the transaction and propagates

The first transaction of an id on a producer calls InitProducerId (an older instance's open
transaction aborted, its epoch fenced); later ones go on at the epoch each end raised. The
records go to the logs as they are sent (a read_committed reader sees them at the commit, a
read_uncommitted one at once); before each batch's append its partitions are added to the
transaction, so whoever aborts it knows every partition it wrote. The group's positions wait in
the transaction's row and become the group's only when its commit completes. A zombie (this
producer after a newer instance of the id initialised) gets ProducerFencedError from its next
step, nothing of it written; such a producer is done with the id. The coordinator is
``control_plane.transactions.coordinator``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.state import InvalidTransactionStateError
from log_store.crash import crash_point
from log_store.errors import InvalidRecordError, ProducerFencedError
from pipelines.driver_batches import is_plain

if TYPE_CHECKING:
    from control_plane.transactions.state import TransactionRow
    from pipelines.producer import ProduceResult, Producer


def as_rows(records) -> pa.Table:
    """``records`` as Arrow rows the driver's path takes (``driver_batches.is_plain``): an Arrow
    table, a list of dicts (``key``, ``value``: text or bytes; ``headers``, ``timestamp``), or a
    DataFrame (brought to the driver)."""
    if isinstance(records, list):
        records = pa.Table.from_pylist([{"key": r.get("key"), **r} for r in records]) if records else \
            pa.table({"value": pa.array([], pa.binary())})
    elif not isinstance(records, pa.Table):
        records = records.toArrow()
    if not is_plain(records.schema):
        raise InvalidRecordError(f"a transaction sends rows of key, value (text or bytes), headers and timestamp; "
                                 f"got columns {records.schema.names}: convert them first; nothing was sent")
    return records


class TransactionalId:
    """One producer's hold on a transactional id: the producer id and epoch InitProducerId gave,
    a producer per topic under that id, and whether it was fenced."""

    def __init__(self, producer: "Producer", transactional_id: str, timeout_ms: int) -> None:
        self.producer = producer
        self.transactional_id = transactional_id
        self.coordinator = TransactionCoordinator(producer.spark, producer.admin.layout.root)
        row = self.coordinator.init_producer_id(transactional_id, timeout_ms)
        self.producer_id, self.epoch = row.producer_id, row.epoch
        self.topics: dict[str, "Producer"] = {}
        self.fenced: ProducerFencedError | None = None
        self.open: Transaction | None = None

    def begin(self) -> "Transaction":
        if self.fenced is not None:
            raise ProducerFencedError(f"this producer was fenced on transactional id '{self.transactional_id}' "
                                      f"({self.fenced}); a new producer instance initialises the id again")
        if self.open is not None:
            raise InvalidTransactionStateError(f"transactional id '{self.transactional_id}' has a transaction open "
                                               "on this producer: end it first")
        self.open = Transaction(self)
        return self.open

    def producer_for(self, topic: str) -> "Producer":
        from pipelines.producer import Producer

        if topic not in self.topics:
            p = self.producer
            made = Producer(p.spark, p.admin.layout.root, topic, self.producer_id, p.settings, p.replication_settings)
            made.in_transaction = self.in_transaction
            self.topics[topic] = made
        return self.topics[topic]

    def in_transaction(self, topic: str, rows: pa.Table) -> dict[str, int]:
        """Before a batch's append: its partitions added to the transaction (AddPartitionsToTxn)."""
        partitions = sorted(set(pc.unique(rows.column("partition")).to_pylist()))
        self.guard(lambda: self.coordinator.add_partitions(self.transactional_id, self.epoch, {topic: partitions},
                                                           self.producer_id))
        crash_point("txn:after_add_partitions")
        if self.open is not None:
            self.open.touched = True
        return {self.producer_id: self.epoch}

    def follow(self, row: "TransactionRow | None") -> None:
        """Go on at the producer id and epoch the end of this producer's transaction gave: every end
        raises the epoch (KIP-890), an exhausted one moves the id to a new producer id at epoch 0
        (the producers per topic made again under it). Nothing when ``row`` is not that end."""
        if row is None or not row.ended_at(self.producer_id, self.epoch):
            return
        if row.producer_id != self.producer_id:
            self.topics = {}
        self.producer_id, self.epoch = row.producer_id, row.epoch

    def guard(self, step):
        """Run ``step``; a fence it meets is kept: every later step of this producer refuses."""
        try:
            return step()
        except ProducerFencedError as exc:
            self.fenced = exc
            raise


class Transaction:
    """One transaction of a transactional id; a context manager (commit on exit, abort on error)."""

    def __init__(self, owner: TransactionalId) -> None:
        self.owner = owner
        self.touched = False  # partitions or a group added: there is something to end
        self.ended = False

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if self.ended:
            return False
        if exc is None:
            self.commit()
        elif self.owner.fenced is None and not isinstance(exc, ProducerFencedError):
            try:
                self.abort()
            except ProducerFencedError:
                pass  # fenced meanwhile: the newer instance aborted it; the block's error stands
        else:
            self._close()
        return False

    def send(self, records, topic: str | None = None) -> list["ProduceResult"]:
        """Append ``records`` (``as_rows``) to ``topic`` (default: the producer's) in the transaction,
        in batches of ``producer.batch_size``."""
        self._check_open()
        rows = as_rows(records)
        producer = self.owner.producer_for(topic or self.owner.producer.topic)
        size = producer.settings.batch_size
        out = []
        for start in range(0, rows.num_rows, size):
            out.append(self.owner.guard(lambda: producer.send(rows.slice(start, size))))
            crash_point("txn:after_append")
        return out

    def send_offsets(self, group: str, positions: dict[str, dict[int, int]], generation: int = 0,
                     member_id: str = "") -> None:
        """``group``'s positions (topic -> partition -> next offset to read) committed by this
        transaction, only if it commits (Kafka's sendOffsetsToTransaction). ``generation`` and
        ``member_id``: a group member's, checked against the group's fence now."""
        self._check_open()
        owner = self.owner
        owner.guard(lambda: owner.coordinator.add_offsets(owner.transactional_id, owner.epoch, group, owner.producer_id))
        self.touched = True
        owner.guard(lambda: owner.coordinator.txn_offset_commit(owner.transactional_id, owner.epoch, group, positions,
                                                                generation, member_id, owner.producer_id))

    def commit(self) -> None:
        self._end(True)

    def abort(self) -> None:
        self._end(False)

    def _end(self, commit: bool) -> None:
        self._check_open()
        owner = self.owner
        try:
            if self.touched:
                try:
                    row = owner.guard(lambda: owner.coordinator.end_txn(owner.transactional_id, owner.epoch, commit,
                                                                        owner.producer_id))
                except ProducerFencedError:
                    raise
                except Exception:  # decided before it failed: whoever finds the decision finishes it
                    owner.follow(owner.coordinator.table.get(owner.transactional_id))
                    raise
                owner.follow(row)
        finally:
            self._close()

    def _close(self) -> None:
        self.ended = True
        self.owner.open = None

    def _check_open(self) -> None:
        if self.ended:
            raise InvalidTransactionStateError(f"the transaction of '{self.owner.transactional_id}' has ended")
        if self.owner.fenced is not None:
            raise ProducerFencedError(f"this producer was fenced on transactional id '{self.owner.transactional_id}' "
                                      f"({self.owner.fenced}); a new producer instance initialises the id again")
