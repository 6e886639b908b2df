"""The filter that selects offset ranges of a log's partitions: pure, one SQL string.

A batch reads [start, end) of each of its partitions. Written as one disjunct per partition
(``partition = p AND offset >= s AND offset < e``), the filter cost about 3 py4j calls per
partition to build (0.65-2.5 s for 64) and an OR chain per row that Spark's generated code runs
slowly (about 1 s more per 1M rows at 64 partitions; BENCHMARKS.md, 2026-11-25). Here it is one
string, in two parts:

- **exact**, evaluated per row: ``partition IN (...)`` (Delta prunes the other directories) and
  the offset bounds looked up by partition number in two array literals (a constant-time
  lookup);
- **skipping**, for Delta's file statistics and Parquet's row groups: the union of the ranges'
  offsets as a few spans (``offset >= a AND offset < b``). Delta's data skipping does not tie a
  partition to its range (it takes a partition term in a data filter as unknown), so the
  per-partition disjuncts skipped exactly the files outside this union; more than ``MAX_SPANS``
  disjoint spans are joined across their narrowest gaps, which skips a little less.

An ordered batch (partition, then offset) is sorted without Spark's sampling pass: a global
``orderBy`` samples the input to choose range bounds, which reads the whole batch a second time.
The bounds are known here (whole partitions, in ascending number), so each partition gets a
shuffle key that Spark's hash partitioning sends to a chosen shuffle partition: contiguous
blocks of partitions to ascending shuffle partitions, then a sort within each (``ordering_keys``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

import mmh3

Ranges = Mapping[int, tuple[int, int]]
MAX_SPANS = 4  # disjuncts in the skipping part: each is evaluated per row too


def offset_spans(ranges: Ranges, max_spans: int = MAX_SPANS) -> list[tuple[int, int]]:
    """The union of the non-empty ranges' [start, end) as sorted disjoint spans, at most
    ``max_spans`` (neighbours joined across the narrowest gaps)."""
    spans: list[tuple[int, int]] = []
    for start, end in sorted((s, e) for s, e in ranges.values() if e > s):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    while len(spans) > max_spans:
        i = min(range(1, len(spans)), key=lambda j: spans[j][0] - spans[j - 1][1])
        spans[i - 1:i + 1] = [(spans[i - 1][0], spans[i][1])]
    return spans


def by_partition(values: Mapping[int, int], suffix: str = "") -> str:
    """``values[partition]`` for each row as a SQL expression: an array literal indexed by the
    partition number (a constant-time lookup; 0 where absent). ``suffix`` "L" makes it bigint."""
    width = max(values) + 1
    items = ", ".join(f"{values.get(p, 0)}{suffix}" for p in range(width))
    return f"try_element_at(array({items}), `partition` + 1)"


def range_filter(ranges: Ranges) -> str | None:
    """A Spark SQL predicate true exactly for the records in ``ranges`` ({partition: (start,
    end)}, end exclusive); None when every range is empty."""
    wanted = {int(p): (int(s), int(e)) for p, (s, e) in ranges.items() if e > s}
    if not wanted:
        return None
    starts = by_partition({p: s for p, (s, _e) in wanted.items()}, "L")
    ends = by_partition({p: e for p, (_s, e) in wanted.items()}, "L")
    exact = (f"`partition` IN ({', '.join(str(p) for p in sorted(wanted))}) "
             f"AND `offset` >= {starts} AND `offset` < {ends}")
    spans = " OR ".join(f"(`offset` >= {a} AND `offset` < {b})" for a, b in offset_spans(wanted))
    return f"{exact} AND ({spans})"


SPARK_HASH_SEED = 42  # Spark's Murmur3Hash seed: hash() and HashPartitioning


def spark_hash_partition(value: int, shuffle_partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning sends an int value to:
    ``pmod(murmur3_32(value, 42), n)``, as ``HashPartitioning`` computes it (Murmur3_x86_32.hashInt
    over the int's four little-endian bytes)."""
    return mmh3.hash(struct.pack("<i", value), SPARK_HASH_SEED) % shuffle_partitions


def batch_position(ranges: Ranges) -> str:
    """Each row's place in the batch sorted by (partition, offset), as one SQL expression:
    ``offset`` plus a per-partition shift (rows of the lower partitions in the batch, less the
    partition's start). One long key sorts as the two columns do, but Spark radix-sorts a single
    integer key and compares only prefixes, where (partition, offset) fell back to comparing rows
    for every tie on the partition (an ordered 1M-record read 0.9-1.0 -> 0.7 s; BENCHMARKS.md,
    2026-11-26). Values are 0 .. rows - 1 for the rows ``range_filter`` keeps."""
    shift: dict[int, int] = {}
    before = 0
    for p, (s, e) in sorted((int(p), (int(s), int(e))) for p, (s, e) in ranges.items() if e > s):
        shift[p] = before - s
        before += e - s
    return f"`offset` + {by_partition(shift, 'L')}"


def ordering_keys(partitions: Iterable[int], parallelism: int) -> tuple[dict[int, int], int]:
    """Shuffle keys that keep partitions in ascending order across shuffle partitions.

    Returns ({partition: int key}, shuffle partition count m): the i-th of n partitions (in
    ascending number) goes to shuffle partition ``i * m // n`` (m = min(n, parallelism)), so a
    sort within each shuffle partition by (partition, offset) is the global order.
    """
    parts = sorted(set(partitions))
    m = max(1, min(len(parts), parallelism))
    first: dict[int, int] = {}  # shuffle partition -> smallest non-negative int hashed there
    value = 0
    while len(first) < m:
        first.setdefault(spark_hash_partition(value, m), value)
        value += 1
    return {p: first[i * m // len(parts)] for i, p in enumerate(parts)}, m
