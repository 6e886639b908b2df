"""``format("lakelog")`` in the driver: the Python side of lakelog's JVM data source
(``log_store/jvm``, ``lakelog.spark``). Spark calls the JVM source and sink; they call these
methods through py4j (as ``foreachBatch`` calls a Python function), so every rule stays in
Python: the options (``options``), where a read starts and each micro-batch ends (``planner``),
the rows of a planned read (``reading``: Spark's Parquet reader over the planned files) and
producing (``sink``).

A stream source is opened once per query run and keeps its planner here, under the id the JVM
gave it. Its first offset is written to the query's checkpoint (the source's metadata folder)
the first time it is planned, so a query restarted before its first batch was recorded starts
where it was going to (``startingOffsets=latest`` is not taken again later).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from log_store.delta_classes import jvm_json
from log_store.errors import InvalidConfigurationError
from log_store.files import is_remote, list_names, local_path, read_file, write_file
from log_store.frames import frame_of
from log_store.object_store import is_s3
from log_store.session import hadoop_settings, install_format_side, is_connect
import pipelines.spark.sink as sink
from pipelines.spark.offsets import StreamOffset
from pipelines.spark.options import parse_source_options
from pipelines.spark.planner import UNLIMITED, Planner
from pipelines.spark.roots import read_storage, resolve_root
from pipelines.spark.reading import frame, source_schema

FORMAT = "lakelog"
DEFAULT_ROOT = "__lakelog_default_root"  # the session's default root, as the JVM side passes it
INITIAL = "lakelog-initial.json"


@dataclass
class _Stream:
    """An open stream source: its planner, its folder in the checkpoint, AvailableNow's ends,
    and whether it has been asked for a new offset in this run."""

    planner: Planner
    metadata: str
    caps: dict[str, dict[int, int]] | None = None
    first: StreamOffset | None = field(default=None)
    asked: bool = False

    def is_recorded_batch(self, spark, end: str) -> bool:
        """Whether ``end`` is the end of the query's last micro-batch Spark recorded as done. A
        restarted query hands a V1 source that batch once more, before anything else, for the
        source to reload what it needs (and drops the rows): nothing is read or reported for it."""
        checkpoint, _, index = self.metadata.rstrip("/").rpartition("/sources/")
        done = [int(n) for n in list_names(spark, f"{checkpoint}/commits") if n.isdigit()]
        if not done or not index.isdigit():
            return False
        planned = read_file(spark, f"{checkpoint}/offsets/{max(done)}")
        lines = planned.decode("utf-8").splitlines() if planned else []
        line = lines[2 + int(index)] if len(lines) > 2 + int(index) else None
        return line is not None and line.strip() not in ("", "-") and json.loads(line) == json.loads(end)

    def initial(self, spark) -> StreamOffset:
        """The stream's first offset: from the checkpoint, or planned now and written there."""
        if self.first is None:
            path = f"{self.metadata.rstrip('/')}/{INITIAL}"
            kept = read_file(spark, path)
            if kept is not None:
                self.first = StreamOffset.from_json(kept.decode("utf-8"))
            else:
                self.first = self.planner.initial()
                self.planner.publish(self.first)  # the group counts from the start, before its first batch
                write_file(spark, path, _text(self.first).encode("utf-8"))
        return self.first


def _as_dict(spark, options) -> dict[str, str]:
    """The JVM's options map as a dict in one py4j call (``jvm_json``): iterated through py4j it
    costs a call a key and a converted Java exception at its end, about 60 ms a map."""
    if isinstance(options, dict):
        return dict(options)
    return {str(k): str(v) for k, v in jvm_json(spark, options).items()}


def _as_list(spark, names) -> list[str]:
    """A JVM array of names as a list, in one py4j call (``_as_dict``)."""
    return [str(n) for n in (names if isinstance(names, (list, tuple)) else jvm_json(spark, names))]


def _text(offset: StreamOffset) -> str:
    """An offset's JSON as Spark keeps and compares it: one canonical text."""
    return json.dumps(offset.to_json(), separators=(",", ":"))


class FormatSide:
    """``lakelog.spark.PythonSide``, for the JVM source and sink (see the module's docstring)."""

    class Java:
        implements = ["lakelog.spark.PythonSide"]

    def __init__(self, spark) -> None:
        self.spark = spark
        self.streams: dict[str, _Stream] = {}

    def alive(self) -> bool:
        return True

    # -- reads ---------------------------------------------------------------------------------------
    def _planner(self, options, streaming: bool) -> Planner:
        given = _as_dict(self.spark, options)
        default = given.pop(DEFAULT_ROOT, None)
        opts = parse_source_options(given, streaming=streaming)
        if opts.group and not streaming:
            raise InvalidConfigurationError(
                "the group option is for streams (spark.readStream): a batch read keeps no positions")
        root = resolve_root(opts.root, default)
        storage = read_storage(root, hadoop_settings(self.spark, "fs.s3a."), opts.storage)
        # Spark's own reader where the session reaches the files: a local root, or S3 through the
        # session's S3A settings (storage.* options are delta-rs's, which Spark's reader does not take)
        spark_reads = not is_remote(root) or (is_s3(root) and not opts.storage and bool(storage))
        return Planner(root, opts, self.spark, storage or None, spark_reads)

    def readSchema(self, options, streaming: bool) -> str:
        """Spark asks at ``load()``: the options are checked here and named topics and assigned
        partitions must exist, so a bad read fails at ``load()``, not in a stream's first batch."""
        planner = self._planner(options, streaming)
        planner.bounds(planner.topics())
        return source_schema(planner.opts.include_headers).json()

    def open(self, source: str, options, metadata_path: str) -> int:
        planner = self._planner(options, True)
        planner.topics()
        self.streams[source] = _Stream(planner, metadata_path)
        return planner.opts.max_offsets_per_trigger or -1

    def latestOffset(self, source: str, start: str | None, max_rows: int) -> str | None:
        stream = self.streams[source]
        stream.asked = True
        begun = StreamOffset.from_json(start) if start else stream.initial(self.spark)
        stream.planner.publish(begun)  # what earlier micro-batches delivered (Spark commits the last one late)
        end = stream.planner.next_end(begun, min(int(max_rows), UNLIMITED), stream.caps)
        if start is None and end == begun:
            return None  # nothing yet: no first micro-batch
        return _text(end)

    def batch(self, source: str, start: str | None, end: str):
        stream = self.streams[source]
        if not stream.asked and stream.is_recorded_batch(self.spark, end):
            return self.spark.createDataFrame([], source_schema(stream.planner.opts.include_headers))._jdf
        begun = StreamOffset.from_json(start) if start else stream.initial(self.spark)
        planner = stream.planner
        reads = planner.reads(begun, StreamOffset.from_json(end))
        return self._frame(planner, reads)._jdf

    def commit(self, source: str, end: str) -> None:
        self.streams[source].planner.publish(StreamOffset.from_json(end))

    def prepareForTriggerAvailableNow(self, source: str) -> None:
        """Trigger.AvailableNow: read what the log holds now, in capped batches, then stop."""
        stream = self.streams[source]
        stream.caps = {t: dict(now.snap.log_ends) for t, now in stream.planner.topics().items()}

    def metrics(self, source: str, end: str) -> str:
        found = self.streams[source].planner.metrics(StreamOffset.from_json(end))
        return "\n".join(f"{k}={v}" for k, v in found.items())

    def close(self, source: str) -> None:
        self.streams.pop(source, None)

    def read(self, options, columns) -> object:
        planner = self._planner(options, False)
        start, end = planner.batch_range()
        return self._frame(planner, planner.reads(start, end)).select(*_as_list(self.spark, columns))._jdf

    def _frame(self, planner: Planner, reads):
        opts = planner.opts
        return frame(self.spark, reads, opts.include_headers, planner.spark_reads, opts.min_partitions,
                     opts.max_records_per_partition)

    # -- writes --------------------------------------------------------------------------------------
    def write(self, options, data, batch_id: int, mode: str) -> None:
        given = _as_dict(self.spark, options)
        default = given.pop(DEFAULT_ROOT, None)
        sink.write(self.spark, given, default, frame_of(self.spark, data), None if batch_id < 0 else int(batch_id), mode)


_SIDES: dict[int, FormatSide] = {}


def register(spark, root: str | None = None) -> None:
    """Make ``format("lakelog")`` work in ``spark``: its reads and writes call this Python
    process (through py4j). ``root`` (default ``$LAKELOG_ROOT``) is used when a read or write
    gives no ``root`` option; it is the session's (``spark.conf`` ``lakelog.root``). On a Spark
    Connect session, which has no py4j gateway to call back, reads and writes are the Python data
    source's (``python_source``)."""
    if is_connect(spark):
        from pipelines.spark import python_source

        python_source.register(spark, root)
        return
    default = root or os.environ.get("LAKELOG_ROOT")
    if default and not is_remote(default):
        default = str(local_path(default))
    key = id(spark.sparkContext)
    side = _SIDES.setdefault(key, FormatSide(spark))
    install_format_side(spark, side, default)
