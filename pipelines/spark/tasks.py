"""How a read's offset ranges become Spark tasks, and how a micro-batch's record limit is shared
over partitions: Spark's Kafka source's ``KafkaOffsetRangeCalculator`` and ``rateLimit``, pure."""

from __future__ import annotations

TASK_RECORDS = 200_000  # about this many records per Spark task of a read, unless the options say

Span = tuple[int, int, int]  # (partition, start, end)


def share_by_lag(lags: dict, limit: int) -> dict:
    """``limit`` records shared over the keys of ``lags`` (records each could take) in proportion
    to their lag, as Spark's Kafka source shares ``maxOffsetsPerTrigger``: the shares are whole,
    sum to ``min(limit, total lag)`` exactly (largest remainders first), and none passes its lag."""
    lags = {k: n for k, n in lags.items() if n > 0}
    total = sum(lags.values())
    if total <= limit:
        return lags
    exact = {k: limit * n / total for k, n in lags.items()}
    shares = {k: int(x) for k, x in exact.items()}
    for k in sorted(lags, key=lambda k: (shares[k] - exact[k], str(k)))[:limit - sum(shares.values())]:
        shares[k] += 1
    return {k: n for k, n in shares.items() if n > 0}


def split(spans: list[Span], task_records: int | None = None) -> list[Span]:
    """Partition ranges cut into pieces of at most ``task_records`` records (Kafka's source's
    range calculator): one partition's backlog spreads over several tasks, never one worker's
    memory."""
    task_records = task_records or TASK_RECORDS
    out = []
    for p, s, e in spans:
        out += [(p, lo, min(lo + task_records, e)) for lo in range(s, e, task_records)]
    return out


def pack(spans: list[Span], task_records: int | None = None) -> list[list[Span]]:
    """Partition ranges (partition, start, end) packed into about one task per ``task_records``
    records (at least one, at most one per range), the largest first into the emptiest task."""
    task_records = task_records or TASK_RECORDS
    if not spans:
        return []
    total = sum(e - s for _p, s, e in spans)
    tasks: list[list[Span]] = [[] for _ in range(min(len(spans), total // task_records + 1))]
    loads = [0] * len(tasks)
    for span in sorted(spans, key=lambda x: x[1] - x[2]):
        i = loads.index(min(loads))
        tasks[i].append(span)
        loads[i] += span[2] - span[1]
    return [sorted(t) for t in tasks]


def divide(span: Span, parts: int) -> list[Span]:
    """``span`` cut into ``parts`` pieces of nearly equal size (Kafka's ``getDividedPartition``)."""
    p, s, e = span
    parts = max(1, min(parts, e - s))
    bounds = [s + (e - s) * i // parts for i in range(parts + 1)]
    return [(p, lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


def plan_tasks(spans: dict[str, list[Span]], min_partitions: int | None = None,
               max_records: int | None = None) -> dict[str, list[list[Span]]]:
    """The Spark tasks reading ``spans`` (per topic), each a list of spans of one topic. By
    default ranges are cut into pieces of ``TASK_RECORDS`` and packed, so a batch of a few records
    is one task and a large one is spread. With ``maxRecordsPerPartition`` or ``minPartitions``,
    as Spark's Kafka source: each piece a task of its own, no range above ``max_records``, and
    while there are fewer than ``min_partitions`` tasks the ranges are cut in proportion to
    their size (a range of n records into round(n / (total / min_partitions)) pieces)."""
    if min_partitions is None and max_records is None:
        return {t: pack(split(s)) for t, s in spans.items()}
    pieces = {t: split(s, max_records) for t, s in spans.items()}
    count = sum(len(v) for v in pieces.values())
    if min_partitions is not None and min_partitions > count:
        total = sum(e - s for v in pieces.values() for _p, s, e in v)
        ideal = total / min_partitions
        pieces = {t: [piece for span in v for piece in divide(span, max(round((span[2] - span[1]) / ideal), 1))]
                  for t, v in pieces.items()}
    return {t: [[piece] for piece in v] for t, v in pieces.items()}
