"""The transaction coordinator: Kafka's steps over the ``transactions`` table (docs/design.md,
Transactions). Each change to a transactional id's row is one commit that depends on the row's
version (``TransactionTable.record``); a change that lost to another is read again and tried
again, so its checks (``state``'s transitions, the epoch fence) are made on the row it replaces.

Ending a transaction: the decision (Prepare*, the epoch raised) in one commit to the row; then, for
each topic, its partitions' markers in one commit (``log_store.txn_markers.write_markers``, at
the raised epoch); then, on a commit, the group's positions kept with the transaction (once, by
an application version of ``offset_commits``); then Complete*. Whoever finds a decision without
its Complete* finishes it (the next InitProducerId, ``tick``, ``abort``): every step after the
decision is idempotent. A crash point names each gap (``log_store.crash``)."""

from __future__ import annotations

import logging
import time
from typing import Callable

from control_plane.group.offsets import GroupOffsets
from control_plane.layout import RootLayout
from control_plane.records import TopicPartition
from control_plane.tables import ControlTables, counted
from control_plane.topics import TopicAdmin
from control_plane.transactions import compaction
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import (
    InvalidTransactionStateError, ProducerFencedError, TimeoutWatch, TransactionRow, UnknownTransactionalIdError,
    completed, decided, initialized, new_txn_producer_id, with_group, with_partitions, with_positions,
)
from control_plane.transactions.table import TransactionTable
from log_store.crash import crash_point
from log_store.errors import ConcurrentCommitError, IllegalGenerationError, InvalidPartitionMetadataError, UnknownTopicError
from log_store.names import fence_property
from log_store.txn_markers import write_markers

ATTEMPTS = 50  # changes to one id's row lost to others before giving up
COMPACT_EVERY = 5.0  # seconds between two compaction steps of one coordinator (``tick``)
log = logging.getLogger("lakelog.transactions")


def positions_app_id(transactional_id: str) -> str:
    """The application version of ``offset_commits`` recording which of the id's transactions had
    its positions committed (``positions_version``): written once, whoever finishes it."""
    return f"lakelog.txn.positions.{transactional_id}"


def positions_version(row: TransactionRow) -> int:
    """The version ``positions_app_id`` is raised to by the decision ``row`` holds: the row's version,
    which rises with every change to the id, across a move to a new producer id too (where the
    epoch starts again at 0). A decision of the older format (no ``ended_producer_id``) counts
    as it did, its ended epoch + 1, below any later decision's row version."""
    return row.ended_epoch + 1 if row.ended_producer_id is None else row.version


class TransactionCoordinator:
    """The coordinator's steps for every transactional id under one root."""

    def __init__(self, spark, root: str, clock: Callable[[], float] = time.monotonic,
                 new_producer_id: Callable[[], str] = new_txn_producer_id,
                 history_retention_ms: int = compaction.DEFAULT_RETENTION_MS,
                 id_expiration_ms: int = compaction.DEFAULT_EXPIRATION_MS) -> None:
        self.new_producer_id = new_producer_id  # names a new producer id (a new id's, an exhausted epoch's)
        self.history_retention_ms = history_retention_ms  # the table's windows (``compaction``)
        self.id_expiration_ms = id_expiration_ms
        self._compacted_at: float | None = None  # time.monotonic() of this coordinator's last step
        self.tables = ControlTables(spark, RootLayout(root))
        self.table = TransactionTable(self.tables)
        self.admin = TopicAdmin(spark, root)
        self.offsets = GroupOffsets(spark, root)
        self.watch = TimeoutWatch(clock)  # this observer's own clock, for ``expire``

    # -- the producer's steps --------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int = 60_000,
                         new_producer_id: Callable[[], str] | None = None) -> TransactionRow:
        """InitProducerId: a decided transaction finished, an ongoing one aborted, then the epoch
        raised (a new id gets a producer id of its own, kept across epochs, at epoch 0; an exhausted
        epoch moves the id to a new one at 0). Returns the row at the new epoch: the caller's
        producer id and epoch. ``new_producer_id`` names a new producer (default: the coordinator's)."""
        new_producer_id = new_producer_id or self.new_producer_id
        if not transactional_id:
            raise InvalidTransactionStateError("a transactional id must not be empty")
        for _ in range(ATTEMPTS):
            row, version = self.table.lookup(transactional_id)
            if row is not None and not row.state.settled:
                self._settle(row)
                continue
            new = initialized(row, transactional_id, row.producer_id if row else new_producer_id(), timeout_ms,
                              new_producer_id)
            if row is None:  # a new id, or one forgotten (``compaction``): its versions go on from the last
                new = new.model_copy(update={"version": version + 1})
            if self.table.record(new):
                return new
        raise ConcurrentCommitError(f"transactional id '{transactional_id}': InitProducerId lost to other changes "
                                    f"{ATTEMPTS} times; try again")

    def add_partitions(self, transactional_id: str, epoch: int, partitions: dict[str, list[int]],
                       producer_id: str | None = None, row: TransactionRow | None = None) -> TransactionRow:
        """AddPartitionsToTxn, before any append to them (nothing recorded when all are in already),
        each topic's incarnation recorded with them (its markers go to that one only). ``row``: the
        id's row as the caller just read it, tried first (as every step's, see ``_change``)."""
        incarnations = {t: self.admin.incarnation(t) for t in partitions}

        def change(row: TransactionRow) -> TransactionRow | None:
            if (row.epoch == epoch and row.state == TxnState.ONGOING
                    and all(set(ps) <= set(row.partitions.get(t, [])) for t, ps in partitions.items())
                    and all(row.incarnations.get(t) in (None, i) for t, i in incarnations.items())):
                return None
            return with_partitions(row, epoch, partitions, incarnations)

        return self._change(transactional_id, change, producer_id, row)

    def add_offsets(self, transactional_id: str, epoch: int, group: str, producer_id: str | None = None,
                    row: TransactionRow | None = None) -> TransactionRow:
        """AddOffsetsToTxn: ``group``'s positions will be committed by the transaction."""
        def change(row: TransactionRow) -> TransactionRow | None:
            if row.epoch == epoch and row.state == TxnState.ONGOING and row.group == group:
                return None
            return with_group(row, epoch, group)

        return self._change(transactional_id, change, producer_id, row)

    def txn_offset_commit(self, transactional_id: str, epoch: int, group: str, positions: dict[str, dict[int, int]],
                          generation: int = 0, member_id: str = "", producer_id: str | None = None,
                          row: TransactionRow | None = None) -> TransactionRow:
        """TxnOffsetCommit: positions kept with the transaction, the group's only when its commit
        completes. A member's generation is checked now, against the group's fence, as Kafka's
        group coordinator checks it (IllegalGenerationError: the member was replaced)."""
        if generation > 0 and self.tables.exists("offset_commits"):
            txn = self.tables.rows_transaction("offset_commits")
            try:
                fence = counted(txn, fence_property(group))
            finally:
                txn.release()
            if fence > generation:
                raise IllegalGenerationError(f"member '{member_id}' of group '{group}' sends positions of generation "
                                             f"{generation}, but the group is on generation {fence}: it must rejoin")
        return self._change(transactional_id, lambda row: with_positions(row, epoch, group, positions, generation,
                                                                         member_id), producer_id, row)

    def end_txn(self, transactional_id: str, epoch: int, commit: bool, producer_id: str | None = None,
                row: TransactionRow | None = None) -> TransactionRow:
        """EndTxn: the decision recorded, then finished (markers, positions, Complete*). A retried
        EndTxn of the transaction just ended (the same decision) finishes it again, if need be. The
        row returned holds the producer id and epoch the producer goes on with (a new producer id
        at epoch 0 when the epoch was exhausted)."""
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT

        def change(row: TransactionRow) -> TransactionRow | None:
            if row.ended_at(producer_id, epoch) and row.state in (wanted, done):
                return None  # a retry: decided already
            self._check_producer(row, producer_id)
            return decided(row, epoch, commit, self.new_producer_id)

        row = self._change(transactional_id, change, read=row)
        crash_point("txn:after_decision")
        return self.finish(row)

    # -- finishing, aborting, the timeout ------------------------------------------------------
    def finish(self, row: TransactionRow) -> TransactionRow:
        """Finish the decision ``row`` holds: markers to each topic's partitions (none where they are
        already, or the partition has seen a later epoch), the positions on a commit, Complete* in a
        commit that depends on the row's version (a finisher that lost the race completes nothing).
        Returns the row as it then stands."""
        if not row.state.deciding:
            return row
        commit = row.state == TxnState.PREPARE_COMMIT
        for topic, partitions in sorted(row.partitions.items()):
            self._markers(topic, row.incarnations.get(topic), row.ended_by, row.ended_epoch, commit, partitions)
            crash_point("txn:after_topic_markers")
        if commit and row.group and row.positions:
            self.offsets.commit_once(
                row.group, {TopicPartition(topic=t, partition=p): o for t, ps in row.positions.items() for p, o in ps.items()},
                positions_app_id(row.transactional_id), positions_version(row), row.generation, row.member_id)
            crash_point("txn:after_positions")
        done = completed(row)
        if self.table.record(done):
            return done
        return self.table.get(row.transactional_id) or done

    def _markers(self, topic: str, incarnation: int | None, producer_id: str, ended: int, commit: bool,
                 partitions: list[int]) -> None:
        """One topic's markers, the partition count read again when a resize moved it meanwhile. A
        deleted topic takes none: its log, and what the transaction wrote there, is gone; so does
        one created again since the partitions were added (``incarnation``; None: not recorded)."""
        for attempt in range(ATTEMPTS):
            if incarnation is not None and self.admin.incarnation(topic) != incarnation:
                return
            try:
                log = self.admin.log(topic)
                write_markers(log, producer_id, ended, commit, partitions, log.metadata().undeleted_partition_count)
                return
            except UnknownTopicError:
                return
            except InvalidPartitionMetadataError:
                if attempt == ATTEMPTS - 1:
                    raise

    def _settle(self, row: TransactionRow) -> TransactionRow:
        """An ongoing transaction aborted (in a commit that depends on the version read), a decided
        one finished: what InitProducerId, ``abort`` and the timeout do before anything else."""
        if row.state == TxnState.ONGOING:
            aborted = decided(row, row.epoch, commit=False, new_producer_id=self.new_producer_id)
            if not self.table.record(aborted):
                return self.table.get(row.transactional_id) or row  # it moved: the caller reads it again
            row = aborted
            crash_point("txn:after_decision")
        return self.finish(row)

    def settle(self, row: TransactionRow) -> TransactionRow:
        """End the transaction ``row`` holds as the timeout does (``_settle``), for an admin naming it
        by producer id and epoch: the abort depends on that version, so a row moved meanwhile is
        returned as it stands, untouched."""
        return self._settle(row)

    def abort(self, transactional_id: str) -> TransactionRow:
        """Abort the id's ongoing transaction, or finish its decided one (kafka-transactions.sh's
        abort); the id's next producer goes on at the raised epoch, its current one is fenced."""
        row = self.table.get(transactional_id)
        if row is None:
            raise UnknownTransactionalIdError(f"unknown transactional id '{transactional_id}': "
                                              "`lakelog transactions list` shows the known ones")
        if row.state.settled:
            raise InvalidTransactionStateError(f"transactional id '{transactional_id}' has no open transaction "
                                               f"(it is {row.state.value}): nothing to abort")
        for _ in range(ATTEMPTS):
            row = self._settle(row)
            if row.state.settled:
                return row
            row = self.table.get(transactional_id)
        raise ConcurrentCommitError(f"transactional id '{transactional_id}': the abort lost to other changes "
                                    f"{ATTEMPTS} times; try again")

    def tick(self) -> list[TransactionRow]:
        """Finish every decided transaction, and abort every ongoing one this observer has seen
        unchanged for its ``timeout_ms`` (``TimeoutWatch``: its own clock, from the version it first
        saw; the abort depends on that version), then keep the table short (``compact``). Returns
        the rows it moved."""
        moved = []
        for row in self.table.latest().values():
            if row.state.deciding or self.watch.expired(row):
                moved.append(self._settle(row))
        self.compact()
        return moved

    def compact(self, every: float = COMPACT_EVERY) -> "compaction.Compaction | None":
        """``compaction.compact`` with this coordinator's windows, at most once every ``every``
        seconds (its monotonic clock); a failure is logged and left to the next time."""
        if self._compacted_at is not None and time.monotonic() - self._compacted_at < every:
            return None
        self._compacted_at = time.monotonic()
        try:
            return compaction.compact(self.table, self.history_retention_ms, self.id_expiration_ms)
        except Exception:  # noqa: BLE001 - the table stays as it was; the next tick tries again
            log.exception("compacting the transactions table failed")
            return None

    # -- one change ----------------------------------------------------------------------------
    @staticmethod
    def _check_producer(row: TransactionRow, producer_id: str | None) -> None:
        """A producer naming its producer id (None: not named) is fenced when the id moved to
        another: after a move the epoch starts again at 0, so the epoch alone does not fence it."""
        if producer_id is not None and producer_id != row.producer_id:
            raise ProducerFencedError(f"transactional id '{row.transactional_id}' is now producer id "
                                      f"'{row.producer_id}', not '{producer_id}': this producer was replaced by a "
                                      "newer instance: close it")

    def _change(self, transactional_id: str, change: Callable[[TransactionRow], TransactionRow | None],
                producer_id: str | None = None, read: TransactionRow | None = None) -> TransactionRow:
        """Read the id's row, ``change`` it (None: nothing to record), record it at the next version;
        read again when another change landed first. ``producer_id``: the caller's, checked first.
        ``read``: the row as the caller just read it, used for the first try instead of reading
        again: the record depends on its version, so a row moved meanwhile loses and is read anew."""
        for _ in range(ATTEMPTS):
            row, read = (read, None) if read is not None else (self.table.get(transactional_id), None)
            if row is None:
                raise UnknownTransactionalIdError(f"unknown transactional id '{transactional_id}': a producer "
                                                  "initialises it first (InitProducerId)")
            self._check_producer(row, producer_id)
            new = change(row)
            if new is None:
                return row
            if self.table.record(new):
                return new
        raise ConcurrentCommitError(f"transactional id '{transactional_id}': a change lost to others {ATTEMPTS} "
                                    "times; try again")
