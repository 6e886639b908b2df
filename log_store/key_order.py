"""A key's order across partitions, as the resize gates deliver it: the rule key compaction
applies topic-wide (``cleaning.survivors``).

Every resize is a barrier (``Barrier``): it bumped the epoch of each undeleted partition p from
``before[p]``, so p's records at epoch <= ``before[p]`` were partitioned with the old count and
its later ones with the new count, and the gates deliver every record before a barrier, in every
partition, ahead of any after it. A record's *era* is how many barriers it is after; a record of
an earlier era precedes every record of a later one, in whichever partitions they lie. Within one
era a key's records lie in one partition (the partitioner's) and its offsets order them; a record
a producer placed in another partition of the same era has no order against them, and is left
to the per-partition rule.

The eras come from the log's rows (``leader_epoch``) and the topic's history of resizes; both are
fixed once written: no record of an earlier era is appended after a resize (count fencing), so
what a snapshot holds of earlier eras can only shrink.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field


class Barrier(BaseModel):
    """One resize: the epochs it bumped from (``before``) and the partitions it marked."""

    version: int
    before: dict[int, int]
    marked: list[int] = Field(default_factory=list)


def eras(partitions: pa.Array, epochs: pa.Array, barriers: list[Barrier]) -> pa.Array:
    """Each record's era (``partitions`` and ``leader_epoch`` per record): the barriers it is
    after. A record is before a barrier when its partition is in ``before`` at an epoch up to the
    one bumped from, or was marked by it or an earlier barrier (a marked partition takes no
    records); after it when its partition is in ``before`` at a later epoch or is not in it (made
    by the resize or later: a retirement prunes a reused number's old incarnation)."""
    p = np.asarray(partitions.to_numpy(zero_copy_only=False), dtype=np.int64)
    e = np.asarray(epochs.to_numpy(zero_copy_only=False), dtype=np.int64)
    out = np.zeros(len(p), dtype=np.int64)
    marked: set[int] = set()
    for b in sorted(barriers, key=lambda b: b.version):
        marked |= set(b.marked)
        size = max([*b.before, int(p.max(initial=-1))]) + 1
        listed, bumped_from = np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64)
        for q, epoch in b.before.items():
            listed[q], bumped_from[q] = True, epoch
        out += np.where(listed[p], e > bumped_from[p], True) & ~np.isin(p, sorted(marked))
    return pa.array(out, pa.int64())


def elsewhere(rows: pa.Table, partition: int, topic: pa.Table) -> tuple[pa.Array, pa.Array]:
    """For each of one partition's ``rows`` (``key``, ``era``): whether a record of its key in
    another partition of ``topic`` (``partition``, ``key``, ``era``: the topic's records) is of a
    later era (it supersedes the row), and whether one is of an earlier era (the row's tombstone
    must stay while it does: a reader would get that older record as the key's latest). Where
    ``topic`` has a ``settled`` column, only its settled records supersede: an aborted
    transaction's record, or one an open transaction may yet abort, supersedes nothing."""
    others = topic.filter(pc.and_(pc.not_equal(topic.column("partition"), partition), pc.is_valid(topic.column("key"))))
    settled = others.filter(others.column("settled")) if "settled" in others.column_names else others
    newest = settled.group_by("key").aggregate([("era", "max")])
    oldest = others.group_by("key").aggregate([("era", "min")])
    era = rows.column("era")
    at = pc.index_in(rows.column("key"), value_set=newest.column("key"))
    later = pc.fill_null(pc.greater(pc.take(newest.column("era_max"), at), era), False)
    at = pc.index_in(rows.column("key"), value_set=oldest.column("key"))
    earlier = pc.fill_null(pc.less(pc.take(oldest.column("era_min"), at), era), False)
    return later, earlier
