"""An append of rows already in the driver (Arrow), for a caller that gathered records from
several producers into one commit (``lakelog serve``'s group commit): the rows numbered in
their given order within each partition, and the producers' marks checked and moved. Pure
functions of Arrow tables; ``TopicLog.append_rows`` runs them inside its transaction."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from log_store.errors import (InvalidPartitionMetadataError, InvalidRecordError, ProducerFencedError,
                              StaleProducerSequenceError)
from log_store.names import producer_app_id
from log_store.txn_marks import append_refusal, open_mark, open_since, txn_epoch_app_id, txn_mark_app_id

# What a caller hands to ``TopicLog.append_rows`` (as ``PRODUCER_COLUMNS``; the append adds
# ``offset`` and ``leader_epoch``).
ROW_COLUMNS = ("partition", "key", "value", "headers", "timestamp", "producer_id", "sequence")


def check_marks(known: Mapping[str, int], expected: Mapping[str, int], topic: str) -> None:
    """Refuse (nothing written) when a producer's mark in the log is not the one the caller numbered
    its rows after: another writer committed for that producer meanwhile. The error's ``marks``
    holds the log's marks of the producers that differ."""
    moved = {pid: known.get(producer_app_id(pid), -1) for pid, mark in expected.items()
             if known.get(producer_app_id(pid), -1) != mark}
    if moved:
        raise StaleProducerSequenceError(
            f"the log of {topic} holds other marks for {len(moved)} producers than the append was numbered after "
            f"(e.g. {next(iter(moved))}: {next(iter(moved.values()))}); nothing was written", marks=moved)


def drop_committed(rows: pa.Table, known: Mapping[str, int], expected: dict[str, int | None]) -> pa.Table:
    """``rows`` less those of each producer whose expected mark is None at or below its mark in the
    log (``known``): a retried batch's records already committed, dropped as Kafka's broker drops a
    duplicate. Each such producer's expected mark becomes the log's."""
    dedupe = {pid: known.get(producer_app_id(pid), -1) for pid, mark in expected.items() if mark is None}
    if not dedupe:
        return rows
    expected.update(dedupe)
    floors = pa.array([dedupe.get(pid, -1) if pid is not None else -1 for pid in rows.column("producer_id").to_pylist()],
                      pa.int64())
    return rows.filter(pc.greater(pc.fill_null(rows.column("sequence"), 0), floors))


def producer_marks(rows: pa.Table, expected: Mapping[str, int]) -> dict[str, int]:
    """The highest sequence of each producer in ``rows``: its mark after the append. Every producer
    in the rows must be in ``expected`` and every one of its sequences above the expected mark, or
    nothing is written (the caller numbered them wrong)."""
    if rows.num_rows == 0 or rows.column("producer_id").null_count == rows.num_rows:
        return {}
    grouped = (rows.select(["producer_id", "sequence"]).filter(pc.is_valid(rows.column("producer_id")))
               .group_by("producer_id").aggregate([("sequence", "min"), ("sequence", "max")]))
    out = {}
    for pid, low, high in zip(grouped["producer_id"].to_pylist(), grouped["sequence_min"].to_pylist(),
                              grouped["sequence_max"].to_pylist()):
        if pid not in expected:
            raise InvalidRecordError(f"rows of producer {pid!r} came without the mark they were numbered after; "
                                     "nothing was written")
        if low is None or low <= expected[pid]:
            raise InvalidRecordError(f"producer {pid!r} has a row at sequence {low}, at or below its mark "
                                     f"{expected[pid]}; nothing was written")
        out[pid] = int(high)
    return out


def number_rows(rows: pa.Table, bases: Mapping[int, int], epochs: Mapping[int, int], topic: str) -> pa.Table:
    """``rows`` with ``offset`` (each partition's rows numbered from its log end ``bases[p]``, in
    their order in ``rows``) and ``leader_epoch`` (``epochs[p]``). A row of a partition outside
    ``bases`` (the writable partitions) is refused with ``InvalidPartitionMetadataError``."""
    parts = rows.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    if len(parts) == 0:
        return rows.append_column("offset", pa.array([], pa.int64())).append_column("leader_epoch", pa.array([], pa.int32()))
    ids = np.unique(parts)
    outside = [int(p) for p in ids if int(p) not in bases]
    if outside:
        raise InvalidPartitionMetadataError(
            f"partition {outside[0]} of {topic} is not writable (marked, retired or beyond the count); refresh "
            "metadata and re-partition", partitions=outside)
    order = np.argsort(parts, kind="stable")
    ordered = parts[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # where each partition's run begins
    run_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(ordered)]))
    index = np.arange(len(ordered)) - starts[run_of]
    base = np.array([bases[int(p)] for p in ordered[starts]], dtype=np.int64)[run_of]
    offsets = np.empty(len(parts), dtype=np.int64)
    offsets[order] = base + index
    epoch_of = {int(p): epochs[int(p)] for p in ids}
    leader_epochs = np.array([epoch_of[int(p)] for p in ordered[starts]], dtype=np.int32)[run_of]
    epochs_out = np.empty(len(parts), dtype=np.int32)
    epochs_out[order] = leader_epochs
    return rows.append_column("offset", pa.array(offsets)).append_column("leader_epoch", pa.array(epochs_out))


def transaction_marks(rows: pa.Table, known: Mapping[str, int], transactional: Mapping[str, int],
                      topic: str) -> tuple[dict[str, int], list[str]]:
    """What an append of numbered ``rows`` moves of the transactional producers' partition state
    (``log_store.txn_marks``): per partition holding rows of a producer in ``transactional``
    (producer id -> epoch), its mark opened at its first row there unless already open, and its
    epoch. Returns (application versions to set, ids the commit must depend on: a marker or
    another append moving them makes it retry and read them again). Refused with
    ProducerFencedError, before anything is written, where the partition has seen a higher epoch."""
    if not transactional or rows.num_rows == 0:
        return {}, []
    pids = pa.array(list(transactional), pa.string())
    mine = rows.select(["producer_id", "partition", "offset"]).filter(pc.is_in(rows.column("producer_id"), pids))
    if mine.num_rows == 0:
        return {}, []
    firsts = mine.group_by(["producer_id", "partition"]).aggregate([("offset", "min")])
    versions: dict[str, int] = {}
    depends: list[str] = []
    for pid, p, first in zip(firsts["producer_id"].to_pylist(), firsts["partition"].to_pylist(),
                             firsts["offset_min"].to_pylist()):
        epoch_id, mark_id = txn_epoch_app_id(pid, p), txn_mark_app_id(pid, p)
        refusal = append_refusal(known.get(epoch_id), transactional[pid])
        if refusal:
            raise ProducerFencedError(f"producer {pid} may not append to partition {p} of {topic}: {refusal}. "
                                      "Nothing was written; a new producer instance must initialise its id again")
        if open_since(known.get(mark_id)) is None:
            versions[mark_id] = open_mark(int(first))
        versions[epoch_id] = int(transactional[pid])
        depends += [epoch_id, mark_id]
    return versions, depends
