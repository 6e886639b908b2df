"""The layouts' writers of a fenced append: the files of a numbered batch written into the open
transaction, a partitioned log's one file per partition and task, an arrival log's one file per
task tagged with its partitions' ranges; each returns what the commit checks (``TopicLog``)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from log_store.delta_errors import translate
from log_store.dense_offsets import use_one_task
from log_store.engine import DeltaTransaction
from log_store.errors import OffsetCheckError, TableConfigError
from log_store.log_files import RANGES_TAG, decode_ranges, encode_ranges, written_ranges
from log_store.rs_engine import RsTransaction


def _arrow_ranges(table: pa.Table) -> dict[int, tuple[int, int, int]]:
    """(first, last, rows) of each partition in ``table``."""
    grouped = table.group_by("partition").aggregate([("offset", "min"), ("offset", "max"), ("offset", "count")])
    return {int(p): (int(a), int(b), int(n)) for p, a, b, n in zip(
        grouped["partition"].to_pylist(), grouped["offset_min"].to_pylist(), grouped["offset_max"].to_pylist(),
        grouped["offset_count"].to_pylist())}


def write_partitioned(path: str, txn: DeltaTransaction, out: DataFrame, rows: int | None, producer_id: str | None,
                      mark: int, partitions: int) -> tuple[list[tuple[int, int, int, int]], int]:
    """A partitioned log's files of ``out`` (one file per partition, in offset order); returns
    each file's (partition, rows, first, last offset), from Delta's statistics, and the highest
    sequence."""
    if use_one_task(rows):
        # A small batch is numbered in one Spark job that brings its rows to the driver, and
        # written from there by pyarrow, a file per partition: a Spark write job of its own
        # cost more than the rows (one task writing a file per partition).
        try:
            table = out.toArrow()
        except Exception as exc:
            raise translate(exc) from exc
        written = txn.write_rows(table, partition_by="partition")
    else:
        written = txn.write(by_partition(out, partitions))
    return _partitioned_parts(path, written, producer_id, mark)


GATHER_ABOVE = 16  # log partitions beyond which a large write gathers each partition's rows (BENCHMARKS.md)


def by_partition(out: DataFrame, partitions: int) -> DataFrame:
    """``out``'s rows with each log partition's in one write task, in offset order: a file per
    partition, for topics of more than ``GATHER_ABOVE`` partitions. Written where the rows were
    read, each task writes a file per partition it holds, 256 small files for 64 partitions from
    4 tasks, and the files' fixed costs outweigh the shuffle (1M rows into 64 partitions: 1.1-1.5 s
    faster); into 8 the shuffle costs what it saves. The offsets are set before the shuffle, by
    the tasks that read the rows (``placed_offsets``)."""
    if partitions <= GATHER_ABOVE:
        return out
    tasks = max(1, min(partitions, int(out.sparkSession.conf.get("spark.sql.shuffle.partitions"))))
    return out.repartitionById(tasks, "partition").sortWithinPartitions("partition", "offset")


def write_partitioned_rows(path: str, txn: DeltaTransaction, table: pa.Table) -> list[tuple[int, int, int, int]]:
    """A partitioned log's files of numbered rows already in the driver (a file per partition);
    returns each file's (partition, rows, first, last offset), as ``write_partitioned`` does."""
    return _partitioned_parts(path, txn.write_rows(table, partition_by="partition"), None, -1)[0]


def _partitioned_parts(path: str, written: list, producer_id: str | None,
                       mark: int) -> tuple[list[tuple[int, int, int, int]], int]:
    parts: list[tuple[int, int, int, int]] = []
    max_seq = mark
    for f in written:
        if f.num_records is None or "offset" not in f.min_values or (producer_id and "sequence" not in f.max_values):
            raise TableConfigError(
                f"Delta wrote files without statistics to {path} (is spark.databricks.delta.stats.collect "
                "false, or delta.dataSkippingStatsColumns without offset and sequence?); lakelog counts appended records from them, so "
                "nothing was committed. Turn statistics collection back on."
            )
        if f.num_records:
            parts.append((int(f.partition_values["partition"]), f.num_records, int(f.min_values["offset"]),
                          int(f.max_values["offset"])))
        if producer_id:
            max_seq = max(max_seq, int(f.max_values["sequence"]))
    return parts, max_seq


def write_arrival(spark: SparkSession, path: str, txn: DeltaTransaction, out: DataFrame, rows: int | None,
                  producer_id: str | None, mark: int) -> tuple[list[tuple[int, int, int, int]], int]:
    """An arrival log's files of ``out``: one file per write task holding every partition it
    got; each file's rows, first and last offset per partition read back from the written files
    (a proof of the dense offsets, as the statistics are for a file of one partition) and kept
    in the file's ``lakelog.ranges`` tag for retention and compaction. Returns them as
    ``write_partitioned`` does."""
    if use_one_task(rows):
        try:
            table = out.toArrow()
        except Exception as exc:
            raise translate(exc) from exc
        written, per_file = _arrival_file(txn, table)
    elif isinstance(txn, RsTransaction):  # each task tags its file with the ranges of its rows
        written = txn.write(out, tags_of=ranges_tags)
        per_file = {f.path: decode_ranges(f.add["tags"][RANGES_TAG]) for f in written}
    else:
        written = txn.write(out, hold=True)
        per_file = written_ranges(spark, txn, written)
        txn.add(written, {path: {RANGES_TAG: encode_ranges(r)} for path, r in per_file.items()})
    return _arrival_parts(path, written, per_file, producer_id, mark)


def write_arrival_rows(path: str, txn: DeltaTransaction, table: pa.Table) -> list[tuple[int, int, int, int]]:
    """An arrival log's file of numbered rows already in the driver; returns its (partition, rows,
    first, last offset) per partition, as ``write_arrival`` does."""
    written, per_file = _arrival_file(txn, table)
    return _arrival_parts(path, written, per_file, None, -1)[0]


def ranges_tags(rows: pa.Table) -> dict[str, str]:
    """An arrival file's tags: the (first, last, rows) of each partition among its ``rows``."""
    return {RANGES_TAG: encode_ranges(_arrow_ranges(rows))}


def _arrival_file(txn: DeltaTransaction, table: pa.Table) -> tuple[list, dict[str, dict[int, tuple[int, int, int]]]]:
    """One file of ``table``'s rows in (partition, offset) order, tagged with its ranges."""
    table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    found = _arrow_ranges(table)
    written = txn.write_rows(table, tags={RANGES_TAG: encode_ranges(found)} if found else None)
    return written, {f.path: found for f in written}


def _arrival_parts(path: str, written: list, per_file: dict, producer_id: str | None,
                   mark: int) -> tuple[list[tuple[int, int, int, int]], int]:
    parts: list[tuple[int, int, int, int]] = []
    max_seq = mark
    for f in written:
        if f.num_records is None or (producer_id and "sequence" not in f.max_values):
            raise TableConfigError(f"Delta wrote files without statistics to {path}; nothing was committed. "
                                   "Turn statistics collection back on.")
        mine = per_file.get(f.path, {})
        if f.num_records != sum(n for _a, _b, n in mine.values()):
            raise OffsetCheckError(f"a written file of {path} holds {f.num_records} records, but "
                                   f"{mine} were read back; nothing was committed. This is a bug in lakelog")
        parts.extend((p, n, a, b) for p, (a, b, n) in mine.items())
        if producer_id:
            max_seq = max(max_seq, int(f.max_values["sequence"]))
    return parts, max_seq
