"""A transactional id's row in the ``transactions`` control table and the changes the coordinator
makes to it, without Spark or Delta: each change is one commit that depends on the row's version
(``rules.transition_refusal`` says which may follow which), so two writers of one id never both
win. ``TimeoutWatch`` decides a transaction has hung by the observer's own monotonic clock."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable

from pydantic import BaseModel, Field

from control_plane.transactions.rules import TxnState, transition_refusal
from log_store.errors import LakelogError, ProducerFencedError  # noqa: F401 (raised here, imported from here too)


class UnknownTransactionalIdError(LakelogError):
    """No row for the transactional id: no producer initialised it under this root."""


class InvalidTransactionStateError(LakelogError):
    """A change the transaction's state does not allow (Kafka's INVALID_TXN_STATE)."""


# The ``transactions`` control table: one row per version of a transactional id's state.
TRANSACTION_SCHEMA = (
    "transactional_id STRING NOT NULL, producer_id STRING NOT NULL, epoch INT NOT NULL, state STRING NOT NULL, "
    "partitions ARRAY<STRUCT<topic: STRING, partitions: ARRAY<INT>>>, `group` STRING, "
    "positions ARRAY<STRUCT<topic: STRING, partition: INT, offset: BIGINT>>, generation INT, member_id STRING, "
    "timeout_ms BIGINT, ended_epoch INT, version BIGINT NOT NULL, changed_at TIMESTAMP_NTZ, changed_by STRING"
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class TransactionRow(BaseModel):
    """One version of a transactional id's state; the table keeps every version, for SQL."""

    transactional_id: str
    producer_id: str
    epoch: int = 0
    state: TxnState = TxnState.EMPTY
    partitions: dict[str, list[int]] = Field(default_factory=dict)  # topic -> partitions added
    group: str | None = None  # the group whose positions the transaction commits (AddOffsetsToTxn)
    # the group's positions pending in the transaction (TxnOffsetCommit): topic -> partition ->
    # next offset; the group's committed positions only once the commit decision completes
    positions: dict[str, dict[int, int]] = Field(default_factory=dict)
    generation: int = 0  # the group generation the positions were sent under (0: no group member)
    member_id: str = ""
    timeout_ms: int = 60_000
    ended_epoch: int = -1  # the epoch of the transaction being, or last, decided
    version: int = 1  # the row's version (an application version of the table)
    changed_at: datetime = Field(default_factory=utcnow)
    changed_by: str = "lakelog"

    def changed(self, **changes) -> "TransactionRow":
        return self.model_copy(update={**changes, "version": self.version + 1, "changed_at": utcnow()})

    def row(self) -> dict:
        """The table's row (``TRANSACTION_SCHEMA``)."""
        out = self.model_dump()
        out["state"] = self.state.value
        out["partitions"] = [{"topic": t, "partitions": ps} for t, ps in sorted(self.partitions.items())]
        out["positions"] = [{"topic": t, "partition": p, "offset": o}
                            for t, ps in sorted(self.positions.items()) for p, o in sorted(ps.items())]
        return out

    @classmethod
    def of(cls, row: dict) -> "TransactionRow":
        """A row as the table holds it, back (``row``'s inverse)."""
        positions: dict[str, dict[int, int]] = {}
        for r in row.get("positions") or []:
            positions.setdefault(r["topic"], {})[r["partition"]] = r["offset"]
        return cls.model_validate({**row, "partitions": {r["topic"]: list(r["partitions"] or [])
                                                         for r in row.get("partitions") or []},
                                   "positions": positions})


def _refuse(row: TransactionRow, wanted: TxnState, epoch: int) -> None:
    why = transition_refusal(row.state, wanted, epoch, row.epoch)
    if why is None:
        return
    if epoch != row.epoch:
        raise ProducerFencedError(f"transactional id '{row.transactional_id}': {why}; this producer was replaced "
                                  "by a newer instance: close it")
    raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}': {why}")


def initialized(row: TransactionRow | None, transactional_id: str, producer_id: str, timeout_ms: int) -> TransactionRow:
    """InitProducerId on a settled id: the epoch raised (a new id starts at 0). A transaction still
    ongoing or deciding must be aborted or finished first (``needs_finishing``)."""
    if row is None:
        return TransactionRow(transactional_id=transactional_id, producer_id=producer_id, timeout_ms=timeout_ms)
    if not row.state.settled:
        raise InvalidTransactionStateError(f"transactional id '{transactional_id}' is {row.state.value}: "
                                           "finish or abort it before initializing")
    return row.changed(epoch=row.epoch + 1, state=TxnState.EMPTY, partitions={}, group=None, positions={},
                       timeout_ms=timeout_ms)


def with_partitions(row: TransactionRow, epoch: int, partitions: dict[str, list[int]]) -> TransactionRow:
    """AddPartitionsToTxn: before any append to them, so whoever aborts knows every partition."""
    _refuse(row, TxnState.ONGOING, epoch)
    ongoing = row.state == TxnState.ONGOING
    merged = {t: list(ps) for t, ps in row.partitions.items()} if ongoing else {}
    for topic, ps in partitions.items():
        merged[topic] = sorted(set(merged.get(topic, [])) | set(ps))
    return row.changed(state=TxnState.ONGOING, partitions=merged, group=row.group if ongoing else None,
                       positions=row.positions if ongoing else {})


def with_group(row: TransactionRow, epoch: int, group: str) -> TransactionRow:
    """AddOffsetsToTxn: the group whose positions the transaction commits."""
    _refuse(row, TxnState.ONGOING, epoch)
    if row.group not in (None, group):
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' commits the positions of "
                                           f"group '{row.group}' already; one group per transaction")
    ongoing = row.state == TxnState.ONGOING
    return row.changed(state=TxnState.ONGOING, partitions=row.partitions if ongoing else {}, group=group,
                       positions=row.positions if ongoing else {})


def with_positions(row: TransactionRow, epoch: int, group: str, positions: dict[str, dict[int, int]],
                   generation: int = 0, member_id: str = "") -> TransactionRow:
    """TxnOffsetCommit: ``group``'s positions kept with the transaction (later ones of a partition
    replace earlier), after AddOffsetsToTxn named the group."""
    _refuse(row, TxnState.ONGOING, epoch)
    if row.state != TxnState.ONGOING or row.group != group:
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' has not added group "
                                           f"'{group}' to its transaction (AddOffsetsToTxn first)")
    merged = {t: dict(ps) for t, ps in row.positions.items()}
    for topic, ps in positions.items():
        merged.setdefault(topic, {}).update({int(p): int(o) for p, o in ps.items()})
    return row.changed(positions=merged, generation=generation, member_id=member_id)


def decided(row: TransactionRow, epoch: int, commit: bool) -> TransactionRow:
    """EndTxn's decision: Prepare*, the epoch raised past the transaction (KIP-890's bump), so
    its markers, written at the new epoch, fence its late appends."""
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    _refuse(row, wanted, epoch)
    return row.changed(state=wanted, epoch=row.epoch + 1, ended_epoch=row.epoch)


def completed(row: TransactionRow) -> TransactionRow:
    """Complete*, once every partition holds the decision's marker."""
    if not row.state.deciding:
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' is {row.state.value}: "
                                           "nothing to complete")
    done = TxnState.COMPLETE_COMMIT if row.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return row.changed(state=done)


def aborted_on_timeout(row: TransactionRow) -> TransactionRow:
    """The timeout's abort of an ongoing transaction, at the row's own epoch (the observer holds no
    epoch of its own; its commit depends on the row's version like any other)."""
    return decided(row, row.epoch, commit=False)


class TimeoutWatch:
    """When a transaction has hung: its row seen at one version for ``timeout_ms`` on this
    observer's monotonic clock. Each observer judges by its own clock only; the abort's commit
    depends on the version it watched, so a transaction that moved meanwhile is not aborted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._first_seen: dict[str, tuple[int, float]] = {}

    def expired(self, row: TransactionRow) -> bool:
        if row.state != TxnState.ONGOING:
            self._first_seen.pop(row.transactional_id, None)
            return False
        now = self._clock()
        version, since = self._first_seen.get(row.transactional_id, (None, now))
        if version != row.version:
            self._first_seen[row.transactional_id] = (row.version, now)
            return False
        return (now - since) * 1000 >= row.timeout_ms
