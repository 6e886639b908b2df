"""Where the server puts a Kafka producer's records, and what it answers (docs/serve.md, "Placement").

A Kafka producer picks a partition from the count in its last metadata and retries a batch to the
same partition; after a resize that count may be stale. lakelog's count fencing refuses a stale
append and its own producers re-partition, but a Kafka producer cannot. A topic chooses
(``lakelog.placement``, else the server's ``serve.placement``):

- ``key``: records are placed under the count the server commits with: a keyed record goes where
  ``log_store.partitioner`` (Kafka's default murmur2 partitioner, number for number) puts its key,
  so a key lands where a producer with fresh metadata, or lakelog's own producer, would put it,
  whatever the client's partitioner or count; an unkeyed record stays on the partition the client
  addressed while that one is writable, else goes to a writable one;
- ``client``: every record stays on the partition the client addressed, as Kafka's broker keeps
  it, while that partition is writable; a batch addressed to one a shrink took is placed as ``key``
  places it.

A client numbers a batch's records from the base offset it is answered, in the partition it
addressed: the answer is the offset of the batch's first record when every record of the batch
is there, else -1, Kafka's "offset unknown". Pure: no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from control_plane.topic_config import PLACEMENTS
from log_store.partitioner import partition_for

KEY, CLIENT = PLACEMENTS
UNKNOWN = -1  # the base offset of a batch not wholly at consecutive offsets of the partition addressed


def place_records(keys: Sequence[bytes | None], addressed: int, count: int, writable: Sequence[int],
                  placement: str = KEY) -> np.ndarray:
    """The partition of each record of one batch the client addressed to ``addressed``. ``client``
    placement, while ``addressed`` is writable: all of them there. Otherwise a keyed record's is
    ``partition_for(key, count)``; an unkeyed one's is ``addressed`` if writable, else
    ``writable[addressed % len(writable)]``. ``count`` is the undeleted partition count the append
    is fenced with; ``writable`` the partitions it may write (all below ``count`` on a sound topic)."""
    if placement == CLIENT and addressed in writable:
        return np.full(len(keys), addressed, dtype=np.int32)
    unkeyed = addressed if addressed in writable or not writable else sorted(writable)[addressed % len(writable)]
    return np.fromiter((unkeyed if k is None else partition_for(k, count) for k in keys),
                       dtype=np.int32, count=len(keys))


def base_offsets(partitions: Sequence[np.ndarray], addressed: Sequence[int],
                 ranges: dict[int, tuple[int, int]]) -> list[int]:
    """The base offset each batch is answered with, given each batch's record partitions in queue
    order, the partition each was addressed to, and the appended range each partition got (rows
    numbered in their order in the append): its first record's offset when all its records are in
    the partition addressed (then at consecutive offsets), else ``UNKNOWN``."""
    next_offset = {p: start for p, (start, _end) in ranges.items()}
    bases = []
    for parts, to in zip(partitions, addressed):
        bases.append(next_offset[to] if len(parts) and bool(np.all(parts == to)) else UNKNOWN)
        for p, n in zip(*np.unique(parts, return_counts=True)):
            next_offset[int(p)] += int(n)
    return bases
