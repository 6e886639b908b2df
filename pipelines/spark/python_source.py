"""``format("lakelog")``'s reads on Spark's Python Data Source API (``pyspark.sql.datasource``), for
sessions lakelog's JVM source cannot serve: a Spark Connect client has no py4j gateway for the JVM
source to call back, and a serverless cluster takes no jar. One data source serves a classic session
and a Connect session alike (``register``).

The rules are the JVM source's, in the same code: the options (``options``), where a read starts
and each micro-batch ends under the resize gates (``planner``), what was skipped (``losses``), the
offsets (``offsets``). Spark runs the planning methods in a Python worker on the driver, with no
Spark session: the planner reads the root with delta-rs, and a ``group`` commits its positions
through lakelog's own engine (delta-rs, no JVM) on local and S3 roots. Each task reads its offset
ranges with delta-rs (``reading.read_range``) and hands Spark Arrow record batches.

What the Python API does not give, and so this source does not do: Spark's Kafka source metrics
(``minOffsetsBehindLatest`` ...; ``reportLatestOffset`` gives the log ends as the stream's latest
offset instead), and the source's folder in the query's checkpoint, where the JVM source keeps a
new stream's first offset. Here Spark's own offset log keeps it: Spark runs a first micro-batch
whatever the offsets say, and this source makes it empty, ending where ``startingOffsets`` put
the stream (``_StreamReader.latestOffset``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from log_store.errors import InvalidConfigurationError
from log_store.files import is_remote, local_path
from log_store.session import LazySession
from pipelines.spark.offsets import StreamOffset
from pipelines.spark.options import SourceOptions, parse_source_options
from pipelines.spark.planner import UNLIMITED, Planner
from pipelines.spark.reading import RangeTask, TopicRead, range_tasks, read_range, source_schema
from pipelines.spark.roots import read_storage, resolve_root

FORMAT = "lakelog"
S3A_CONF = "spark.hadoop.fs.s3a."  # S3A's settings as a session's configuration gives them

_log = logging.getLogger("lakelog.spark")


class RangePartition(InputPartition):
    """One Spark task of a read: a ``reading.RangeTask`` (spans of one topic at one log version)."""

    def __init__(self, task: RangeTask) -> None:
        super().__init__(task)


def _partitions(reads: list[TopicRead], opts: SourceOptions) -> list[RangePartition]:
    return [RangePartition(t) for t in range_tasks(reads, opts.min_partitions, opts.max_records_per_partition)]


def _read(partition: RangePartition, include_headers: bool) -> Iterator[pa.RecordBatch]:
    return read_range(partition.value, include_headers)


def _no_session(s3a: dict[str, str]) -> LazySession:
    """What the planner is given for its Spark session: none can be had in a Python data source's
    worker. A group's commits go through lakelog's engine, which on a local root needs no session
    and on S3 only S3A's settings (given here as a session's configuration gives them); whatever
    would need a real session (a control table of an earlier release that Delta's engine must
    write, a root in Google Cloud Storage or Azure) fails saying so."""

    def refuse():
        raise InvalidConfigurationError(
            "format('lakelog') on Spark's Python data source has no Spark session in its planner: the group option "
            "commits through lakelog's engine on local and S3 roots whose control tables it writes; this root's need "
            "Delta's engine through a session (an object store other than S3, or control tables of an earlier "
            "release): drop the group option, or read through lakelog's JVM source (pipelines.spark.register)")

    return LazySession(refuse, {S3A_CONF + k: v for k, v in s3a.items()})


class _BatchReader(DataSourceReader):
    """A batch read: planned once (its tasks hold their spans and log versions); Spark pickles the
    reader for its tasks, so it keeps only the tasks, not the planner."""

    def __init__(self, planner: Planner) -> None:
        start, end = planner.batch_range()
        self.tasks = _partitions(planner.reads(start, end), planner.opts)
        self.include_headers = planner.opts.include_headers

    def partitions(self) -> list[RangePartition]:
        return self.tasks

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.include_headers)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream, driven as ``bridge.FormatSide`` drives the planner for the JVM source. Spark keeps
    the reader in one worker for the query's run; it also pickles a second one for its tasks'
    ``read``, so the planner is made on first use and never pickled."""

    def __init__(self, source: "LakelogDataSource", include_headers: bool) -> None:
        self._source = source
        self._planner: Planner | None = None
        self.include_headers = include_headers
        self._caps: dict[str, dict[int, int]] | None = None
        self._first: StreamOffset | None = None
        self._asked = False  # whether Spark asked for a new offset in this run

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_planner": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = self._source.planner(streaming=True)
        return self._planner

    def initialOffset(self) -> dict:
        """Where ``startingOffsets`` puts the stream, taken once per run (Spark asks again when it
        runs the first micro-batch), and committed to the group at once."""
        if self._first is None:
            self._first = self.planner.initial()
            self.planner.publish(self._first)
        return self._first.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.planner.opts.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what the logs hold now, in capped micro-batches, then stop."""
        self._caps = {t: dict(now.snap.log_ends) for t, now in self.planner.topics().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Where the next micro-batch ends; the first one of a new query ends where it starts.
        Spark runs a first micro-batch whatever the offsets, and keeps no start for it: run again
        after a restart, it asks ``initialOffset`` anew, which for ``latest`` or a time is
        somewhere else by then. Empty, it has nothing to read again, and its end, in Spark's offset
        log before it runs, keeps where the stream starts."""
        begun = StreamOffset.from_json(start)
        first = self._first_batch(begun)
        self._asked = True
        self.planner.publish(begun)  # what earlier micro-batches delivered (Spark commits the last one late)
        if first:
            return begun.to_json()
        rows = min(limit.max_rows, UNLIMITED) if isinstance(limit, ReadMaxRows) else UNLIMITED
        return self.planner.next_end(begun, rows, self._caps).to_json()

    def _first_batch(self, begun: StreamOffset) -> bool:
        """Whether ``begun`` is a new query's start (from ``initialOffset``, before any other offset
        was asked for in this run): its first micro-batch, planned now or run again."""
        return not self._asked and self._first is not None and begun == self._first

    def reportLatestOffset(self) -> dict | None:
        """The stream's latest offset in its progress: each partition's log end as the last plan read it."""
        latest = self.planner.latest()
        if not latest:
            return None
        return {"v": 1, "topics": {t: {"positions": {str(p): e for p, e in sorted(ends.items())}}
                                   for t, ends in sorted(latest.items())}}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begun = StreamOffset.from_json(start)
        if start == end or self._first_batch(begun):  # the first micro-batch is empty (``latestOffset``)
            return []
        return _partitions(self.planner.reads(begun, StreamOffset.from_json(end)), self.planner.opts)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.include_headers)

    def commit(self, end: dict) -> None:
        self.planner.publish(StreamOffset.from_json(end))


class LakelogDataSource(DataSource):
    """``format("lakelog")`` for ``spark.read`` and ``spark.readStream``. ``register`` makes a
    subclass carrying the session's default root and S3A settings (the workers have no session to
    ask)."""

    default_root: str | None = None
    s3a: dict[str, str] = {}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """Spark asks at ``load()``, before it says batch or stream: the options are checked as
        either, and named topics and assigned partitions must exist, so a bad read fails at
        ``load()``, not in a stream's first micro-batch."""
        try:
            planner = self.planner(streaming=True)
        except InvalidConfigurationError:
            planner = self.planner(streaming=False)  # valid as a batch read only, or raises
        planner.bounds(planner.topics())
        return source_schema(planner.opts.include_headers)

    def planner(self, streaming: bool) -> Planner:
        opts = parse_source_options(dict(self.options), streaming=streaming)
        if opts.group and not streaming:
            raise InvalidConfigurationError(
                "the group option is for streams (spark.readStream): a batch read keeps no positions")
        root = resolve_root(opts.root, self.default_root)
        storage = read_storage(root, self.s3a, opts.storage)
        return Planner(root, opts, _no_session(self.s3a), storage or None, spark_reads=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self.planner(streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_source_options(dict(self.options), streaming=True)
        return _StreamReader(self, opts.include_headers)


def register(spark, root: str | None = None, name: str = FORMAT) -> bool:
    """Make ``format(name)`` read lakelog's topics in ``spark``, a classic or a Spark Connect
    session, through Spark's Python data source API; True if registered. ``root`` (default
    ``$LAKELOG_ROOT``) is used when a read gives no ``root`` option. False where a source on the
    session's class path has the name (lakelog's JVM source has ``lakelog``): Spark refuses a
    Python source that name (``DATA_SOURCE_ALREADY_EXISTS``), and ``pipelines.spark.register``
    serves it there; this source can be registered beside it under another name."""
    default = root or os.environ.get("LAKELOG_ROOT")
    if default and not is_remote(default):
        default = str(local_path(default))
    s3a = {k[len(S3A_CONF):]: v for k, v in spark.conf.getAll.items() if k.startswith(S3A_CONF)}
    source = type("RegisteredLakelogSource", (LakelogDataSource,),
                  {"default_root": default, "s3a": s3a, "name": classmethod(lambda cls: name)})
    try:
        spark.dataSource.register(source)
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException, classic or Connect
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        _log.info("format(%r) is a source on the session's class path: the Python source is not registered", name)
        return False
    return True
