"""Where the server puts a Kafka producer's records (docs/serve.md, "Placement").

A Kafka producer picks a partition from the count in its last metadata and retries a batch to the
same partition; after a resize that count may be stale. lakelog's count fencing refuses a stale
append and its own producers re-partition, but a Kafka producer cannot. So the server places
records under the count it commits with: a keyed record goes where ``log_store.partitioner``
(Kafka's default murmur2 partitioner, number for number) puts its key, so a key lands where a
producer with fresh metadata, or lakelog's own producer, would put it; an unkeyed record stays on
the partition the client addressed while that one is writable, else goes to a writable one.
Pure: no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from log_store.partitioner import partition_for


def place_records(keys: Sequence[bytes | None], addressed: int, count: int, writable: Sequence[int]) -> np.ndarray:
    """The partition of each record of one batch the client addressed to ``addressed``: a keyed
    record's is ``partition_for(key, count)``; an unkeyed one's is ``addressed`` if writable, else
    ``writable[addressed % len(writable)]``. ``count`` is the undeleted partition count the append
    is fenced with; ``writable`` the partitions it may write (all below ``count`` on a sound topic)."""
    unkeyed = addressed if addressed in writable or not writable else sorted(writable)[addressed % len(writable)]
    return np.fromiter((unkeyed if k is None else partition_for(k, count) for k in keys),
                       dtype=np.int32, count=len(keys))


def base_offsets(partitions: Sequence[np.ndarray], ranges: dict[int, tuple[int, int]]) -> list[int]:
    """The offset of each batch's first record, given each batch's record partitions in queue order
    and the appended range each partition got (rows numbered in their order in the append)."""
    next_offset = {p: start for p, (start, _end) in ranges.items()}
    bases = []
    for parts in partitions:
        first = -1
        for p, n in zip(*np.unique(parts, return_counts=True)):
            if first < 0 and p == parts[0]:
                first = next_offset[int(p)]
            next_offset[int(p)] += int(n)
        bases.append(first)
    return bases
