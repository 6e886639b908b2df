"""A produce request's batches as they wait for their topic's group commit (``serve.batcher``),
and the answer each gets: kept apart so the produce and transaction APIs name them without the
commit machinery."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from itertools import count as counter

import numpy as np

from serve.records import ProducedBatch

_units = counter()


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
    txn: tuple[str, int] | None = None  # a transactional batch's (lakelog producer id, coordinator epoch)
    first: int = -1  # its first sequence value, once judged
    size: int = 0
    placed: np.ndarray | None = None  # the partition of each record, as the last attempt placed them
    unit: int = field(default_factory=lambda: next(_units))  # shared by a partition's batches of one request: all or none



def by_unit(entries: list[Entry]) -> list[list[Entry]]:
    """``entries`` grouped by unit, in the order each unit's first entry came."""
    units: dict[int, list[Entry]] = {}
    for e in entries:
        units.setdefault(e.unit, []).append(e)
    return list(units.values())
