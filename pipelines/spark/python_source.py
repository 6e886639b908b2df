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
new stream's first offset: here a query stopped before its first micro-batch was committed starts
again where ``startingOffsets`` puts it then. Where that start moves (``latest``, a time), a first
micro-batch run again after a restart cannot be read again, and says so (``failOnDataLoss``).
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
from log_store.session import JVM_JAR, LazySession
from pipelines.spark.offsets import StreamOffset
from pipelines.spark.options import SourceOptions, parse_source_options
from pipelines.spark.planner import UNLIMITED, Planner
from pipelines.spark.reading import RangeTask, TopicRead, range_tasks, read_range, source_schema
from pipelines.spark.roots import read_storage, resolve_root
from pipelines.spark.specs import OffsetSpec

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


def _start_kept(opts: SourceOptions) -> bool:
    """Whether ``startingOffsets`` names the same positions when taken again later: earliest, or
    explicit offsets without -1 (latest), unlike latest and a time."""
    spec = opts.starting
    return isinstance(spec, OffsetSpec) and (spec.kind == "earliest" or (
        spec.kind == "json" and all(o != -1 for per in spec.offsets.values() for o in per.values())))


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
        """Where ``startingOffsets`` puts the stream, taken once per run (Spark asks again on every
        trigger until the first micro-batch), and committed to the group at once."""
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
        self._asked = True
        begun = StreamOffset.from_json(start)
        self.planner.publish(begun)  # what earlier micro-batches delivered (Spark commits the last one late)
        rows = min(limit.max_rows, UNLIMITED) if isinstance(limit, ReadMaxRows) else UNLIMITED
        return self.planner.next_end(begun, rows, self._caps).to_json()

    def reportLatestOffset(self) -> dict | None:
        """The stream's latest offset in its progress: each partition's log end as the last plan read it."""
        latest = self.planner.latest()
        if not latest:
            return None
        return {"v": 1, "topics": {t: {"positions": {str(p): e for p, e in sorted(ends.items())}}
                                   for t, ends in sorted(latest.items())}}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begun, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        if self._replays_first_batch(begun) or start == end:
            return []
        return _partitions(self.planner.reads(begun, finish), self.planner.opts)

    def _replays_first_batch(self, begun: StreamOffset) -> bool:
        """Spark runs a first micro-batch again after a restart from ``initialOffset`` taken anew (it
        keeps no start for it, and this source no folder in the checkpoint). Where the start moves
        (latest, a time), the batch's first records are not known any more: a loss, reported as
        ``failOnDataLoss`` says (without it, the batch delivers nothing and the stream goes on)."""
        if self._asked or self._first is None or begun != self._first or _start_kept(self.planner.opts):
            return False
        for topic in sorted(begun.topics):
            self.planner.losses.report(
                topic, "this query's first micro-batch is run again after a restart, and where it started "
                "(startingOffsets latest or a time, as they stood when the query first started) is not kept: "
                "records of it that its sink did not hold before the restart are not delivered", [],
                "if the sink holds the batch, set failOnDataLoss to false to go on; else start the query with a new "
                "checkpoint location and startingOffsets where the sink's records end")
        return True

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


def jvm_source_present(spark) -> bool:
    """Whether lakelog's JVM source is on ``spark``'s class path (its jar among ``spark.jars``).
    Spark looks a format's name up on the class path first: there it owns ``lakelog``, and a Python
    source registered under that name is never used."""
    jars = (spark.conf.get("spark.jars", "") or "").split(",")
    return any(j.strip().rstrip("/").rsplit("/", 1)[-1] == JVM_JAR for j in jars)


def register(spark, root: str | None = None, name: str = FORMAT) -> bool:
    """Make ``format(name)`` read lakelog's topics in ``spark``, a classic or a Spark Connect
    session, through Spark's Python data source API; True if registered. ``root`` (default
    ``$LAKELOG_ROOT``) is used when a read gives no ``root`` option. Not under ``lakelog`` where
    lakelog's JVM source owns that name (``jvm_source_present``): there ``pipelines.spark.register``
    serves it, and this source can be registered under another name."""
    if name.lower() == FORMAT and jvm_source_present(spark):
        _log.info("format('lakelog') is lakelog's JVM source in this session: the Python source is not registered")
        return False
    default = root or os.environ.get("LAKELOG_ROOT")
    if default and not is_remote(default):
        default = str(local_path(default))
    s3a = {k[len(S3A_CONF):]: v for k, v in spark.conf.getAll.items() if k.startswith(S3A_CONF)}
    source = type("RegisteredLakelogSource", (LakelogDataSource,),
                  {"default_root": default, "s3a": s3a, "name": classmethod(lambda cls: name)})
    spark.dataSource.register(source)
    return True
