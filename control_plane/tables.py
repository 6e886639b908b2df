"""The control-plane Delta tables: creation, conditional inserts, and SQL names.

Tables (under ``<root>/control``): ``topics`` (one row per topic change), ``offset_commits``
(one row per committed position, ownership claim or generation fence), ``group_members`` (one
row per member heartbeat) and ``group_generations`` (one row per group generation). All have
the change data feed on, so every change can be read back with ``table_changes`` as well as
with history and time travel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.topic_config import CONFIG_SCHEMA, KEY_COMPACTION_SCHEMA, LOG_START_SCHEMA
from control_plane.records import (
    GENERATION_SCHEMA, MEMBER_SCHEMA, OFFSET_SCHEMA, REPLICA_SCHEMA, SERVER_SCHEMA, TOPIC_SCHEMA, CommitKind,
    MemberHeartbeat,
)
from control_plane.transactions.state import ADDED_TRANSACTION_COLUMNS, TRANSACTION_SCHEMA
from log_store import commits, rs_reader, rs_tables
from log_store.engine import DeltaTransaction, log_read_directly
from log_store.rs_engine import RsTransaction
from log_store.delta_errors import retry_on_conflict
from log_store.delta_sql import properties
from log_store.object_store import delta_rs_reads
from log_store.frames import arrow_rows, rows_frame, struct_of
from log_store.errors import LakelogError, StorageError
from log_store.names import log_view_names
from log_store.session import is_connect
from log_store.txn_marks import CONTROL_COLUMN
from log_store.table_create import create_table, table_exists

_CHECKED: set[str] = set()
_RAISED: set[str] = set()  # roots whose format this process raised or found current
_COMPLETE: set[str] = set()  # control table paths known to exist with every column
_ROW_TRACKED: dict[str, bool] = {}  # ordered table path -> ordered by row tracking (fixed at creation)

# The layout of the tables under a root; a root written by another layout is refused, not misread.
# Format 3 keeps the compare-and-set counters (topic versions, generations, fences) as application
# versions; a release of format 2 reads only the table properties and would miss a raise, so a
# format-2 root is raised to 3 by this release's first write to it (``ensure``), after which a
# format-2 release refuses it. Format 2's tables are the same otherwise.
FORMAT_PROP = "lakelog.format"
FORMAT_VERSION = 3
READ_FORMATS = ("2", "3")

TABLES = {
    "topics": TOPIC_SCHEMA,
    "offset_commits": OFFSET_SCHEMA,
    "group_members": MEMBER_SCHEMA,
    "group_generations": GENERATION_SCHEMA,
    # Heartbeats are commits that only set an application version (member -> time in ms): cheap
    # to write and to read back from the commit files; the table holds no rows.
    "group_heartbeats": "`group` STRING",
    "topic_configs": CONFIG_SCHEMA,  # control_plane.topic_config
    "record_deletions": LOG_START_SCHEMA,
    "key_compactions": KEY_COMPACTION_SCHEMA,  # one row per partition a key compaction cleaned
    "topic_replicas": REPLICA_SCHEMA,  # control_plane.replication.state
    "servers": SERVER_SCHEMA,  # control_plane.servers (lakelog serve)
    "transactions": TRANSACTION_SCHEMA,  # control_plane.transactions.table: one row per version of an id's state
}
# Made when first written (``ensure_table``), not with every root: only replicated topics use them.
ON_DEMAND = ("topic_replicas", "servers", "key_compactions", "transactions")
# Every control table keeps the change feed (``table_changes``).
COMMON_PROPERTIES = {"delta.enableChangeDataFeed": "true", FORMAT_PROP: str(FORMAT_VERSION)}
# The tables whose current state is "the latest row in commit order" (never a writer's clock):
# each row carries ``commit_order``, one more than the table version its writer's transaction
# read. A writer that saw a row labels its own rows higher, so rows written one after another
# (a member's own rows; a partition's positions, whose writers are fenced by generation or hand
# over through a revocation they wait to see) are labelled in commit order; only writes that
# saw nothing of each other can tie, and ``ORDER_TIEBREAK`` settles those the same way in
# every reader. The campaign's checker verifies labels against Delta's commit versions. Tables
# made before this column (row tracking on) are ordered by ``_metadata.row_commit_version``,
# the commit version itself; row tracking costs every commit a state reconstruction (about
# 0.5 s), and the labels can be read by delta-rs, which has no row tracking.
ORDERED_TABLES = ("offset_commits", "group_members")
COMMIT_ORDER_COLUMN = "commit_order"
ROW_COMMIT_VERSION = "_metadata.row_commit_version"
ORDER_TIEBREAK = {"offset_commits": ("offset", "member_id"), "group_members": ("beat",)}
# offset_commits rows that move a position (claims, fences and expiry reports do not).
POSITION_KINDS = (CommitKind.COMMIT.value, CommitKind.REVOKE.value, CommitKind.RESET.value)


# Columns added to a table after its first release: an older table gets them when first written.
ADDED_COLUMNS = {"offset_commits": {COMMIT_ORDER_COLUMN: "BIGINT", "leader_epoch": "INT"}, "group_members": {COMMIT_ORDER_COLUMN: "BIGINT"},
                 "topic_replicas": {"joining": "ARRAY<STRING>"}, "transactions": ADDED_TRANSACTION_COLUMNS}


# The group_offsets view: each position with when and under which generation it was committed.
GROUP_OFFSETS_COLUMNS = ("group", "topic", "partition", "offset", "committed_at", "generation")
GROUP_OFFSETS_SCHEMA = ("`group` STRING, topic STRING, partition INT, offset BIGINT, "
                        "committed_at TIMESTAMP_NTZ, generation INT")


def reduced_commits(commits: DataFrame, *columns: str) -> list[dict]:
    """offset_commits rows (with ``_order``, see ``ControlTables.ordered``) reduced in Spark to the
    latest row (``order_rank``) of each (group, topic, partition, kind, ``commit_key``), with
    ``columns`` of that row and ``n``, how many rows it stands for. Rule-free: the rules
    (``latest_position_rows``, ``GroupTopicState.of``) give the same over these rows as over every
    row, so they live once, in Python, and a table's history of any length comes back as a few rows
    per partition."""
    kind = F.col("kind")
    key = (F.when(kind == CommitKind.TOPIC_DELETED.value, F.col("offset"))
           .when(kind == CommitKind.EXPIRED.value, F.col("end_offset")))
    rank = F.struct("_order", *ORDER_TIEBREAK["offset_commits"])
    kept = ("_order", "offset", "member_id", *columns)
    rows = (commits.withColumn("_key", key).groupBy("group", "topic", "partition", "kind", "_key")
            .agg(*(F.max_by(c, rank).alias(c) for c in kept), F.count("*").alias("n")).collect())
    return [r.asDict() for r in rows]


def commit_key(row: dict) -> int | None:
    """What tells apart rows of one (group, topic, partition, kind) that all count: a topic
    deletion's version, an expiry report's end (``reduced_commits`` groups by it)."""
    if "_key" in row:
        return row["_key"]
    kind = row["kind"]
    return row["offset"] if kind == CommitKind.TOPIC_DELETED.value else row["end_offset"] if kind == CommitKind.EXPIRED.value else None


def order_rank(name: str, row: dict) -> tuple:
    """Where ``row`` of table ``name`` stands in commit order: its ``_order``, then the tie-break."""
    return (row["_order"], *(row[c] for c in ORDER_TIEBREAK[name]))


def latest_rows(name: str, rows: Iterable[dict], *key: str) -> dict[tuple, dict]:
    """The latest row (``order_rank``) of each ``key`` among plain rows of ordered table ``name``."""
    out: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        if k not in out or order_rank(name, r) > order_rank(name, out[k]):
            out[k] = r
    return out


def member_states_of(rows: Iterable[dict], group: str) -> dict[str, MemberHeartbeat]:
    """Each member of ``group``'s latest state among plain ``group_members`` rows (with ``_order``)."""
    latest = latest_rows("group_members", (r for r in rows if r["group"] == group), "member_id")
    return {m: MemberHeartbeat.model_validate({k: v for k, v in r.items() if k != "_order"})
            for (m,), r in latest.items()}


def latest_position_rows(rows: list[dict]) -> dict[tuple[str, str, int], dict]:
    """Each (group, topic, partition)'s current position among offset_commits rows (plain, or
    ``reduced_commits``; each with ``_order``, see ``ControlTables.ordered``): the position row latest
    in commit order (ties settled by ``ORDER_TIEBREAK``), never by a writer's clock. Rows before a
    group's latest deletion, or before the topic's latest deletion, do not count: a group, or a
    topic, created again with the name starts anew. The one home of this rule, for every reader."""
    group_deleted: dict[str, int] = {}
    topic_deleted: dict[str, int] = {}
    for r in rows:
        if r["kind"] == CommitKind.DELETED.value:
            group_deleted[r["group"]] = max(group_deleted.get(r["group"], -1), r["_order"])
        elif r["kind"] == CommitKind.TOPIC_DELETED.value:
            topic_deleted[r["topic"]] = max(topic_deleted.get(r["topic"], -1), r["_order"])
    out: dict[tuple[str, str, int], dict] = {}
    for r in rows:
        if (r["partition"] < 0 or r["offset"] < 0 or r["kind"] not in POSITION_KINDS
                or r["_order"] <= group_deleted.get(r["group"], -1) or r["_order"] <= topic_deleted.get(r["topic"], -1)):
            continue
        key = (r["group"], r["topic"], r["partition"])
        if key not in out or order_rank("offset_commits", r) > order_rank("offset_commits", out[key]):
            out[key] = r
    return out


# The views derived from others, as Spark SQL (the dialect of ``lakelog sql``): Spark runs them,
# and the JVM-free reader (``control_plane.fast_sql``) runs the same text translated. Each: (the
# views it reads, its query).
DERIVED_VIEWS = {
    "topics": (("topic_history",),
               "SELECT h.* FROM topic_history h JOIN (SELECT topic, max(topic_version) AS latest "
               "FROM topic_history GROUP BY topic) m ON h.topic = m.topic AND h.topic_version = m.latest"),
    "partitions": (("topics",),
                   "SELECT topic, p.*, topic_version, changed_at "
                   "FROM (SELECT topic, explode(partitions) AS p, topic_version, changed_at FROM topics) t"),
    "groups": (("group_generations",),
               "SELECT g.* FROM group_generations g JOIN (SELECT `group`, max(generation) AS latest "
               "FROM group_generations GROUP BY `group`) m ON g.`group` = m.`group` AND g.generation = m.latest"),
    "transactions": (("transaction_history",),
                     "SELECT h.* FROM transaction_history h JOIN (SELECT transactional_id, max(version) AS latest "
                     "FROM transaction_history GROUP BY transactional_id) m "
                     "ON h.transactional_id = m.transactional_id AND h.version = m.latest"),
    "expired_records": (("offset_commits",),
                        "SELECT `group`, topic, partition, offset AS first_offset, end_offset, "
                        "end_offset - offset AS records, member_id, committed_at "
                        "FROM offset_commits WHERE kind = 'expired'"),
}


def views_named(query: str) -> set[str] | None:
    """The names a query may read (its words, lower case), or None for all of them: ``SHOW``
    lists every view. Registering only these keeps a query off the tables it does not read."""
    if re.match(r"\s*show\b", query, re.IGNORECASE):
        return None
    return {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}


# The topics table keeps each topic's latest record version as the application version
# ``log_store.names.topic_version_property(topic)``, raised in the record's own commit: the
# compare-and-set of topic changes (control_plane/topics.py). Earlier releases kept it as a table
# property of that name; the version is the higher of the two. The marker says the table has kept
# them from the start; a table made before it has them from its first change by this lakelog on.
TOPIC_VERSIONS_KEPT = "lakelog.topicVersions"
# Tables written about every second checkpoint every 100 commits, not Delta's 10 (BENCHMARKS.md).
TABLE_PROPERTIES = {"group_heartbeats": {"delta.checkpointInterval": "100"},
                    "servers": {"delta.checkpointInterval": "100"},
                    "offset_commits": {"delta.checkpointInterval": "100"},
                    "group_members": {"delta.checkpointInterval": "100"},
                    "group_generations": {"delta.checkpointInterval": "100"},
                    "topics": {TOPIC_VERSIONS_KEPT: "true"}}


def counted(txn: "DeltaTransaction | RsTransaction", name: str) -> int:
    """What ``name`` counts in ``txn``'s snapshot (a topic's record version, a group's generation or
    fence): its application version, or the table property of that name where an earlier release
    kept it (the higher; 0 for neither). The commit then conflicts with a concurrent raise of it,
    which sets the application version."""
    return max(int(txn.configuration().get(name, 0)), txn.app_version(name), 0)


class ControlTables:
    """The control plane of one root, as Spark sees it."""

    def __init__(self, spark: SparkSession, layout: RootLayout) -> None:
        self.spark = spark
        self.layout = layout

    def path(self, name: str) -> str:
        return self.layout.control(name)

    def check_format(self) -> None:
        """Refuse a root whose control tables were written in another layout (once per root)."""
        if self.layout.root in _CHECKED:
            return
        found = self._format()
        if found is not None and found not in READ_FORMATS:
            newer = found.isdigit() and int(found) > FORMAT_VERSION
            raise StorageError(
                f"the root {self.layout.root} was written by {'a newer' if newer else 'an older'} lakelog "
                f"(control-plane format {found or 1}; this lakelog reads formats {', '.join(READ_FORMATS)}): "
                "nothing was read or written. " + ("Use that release" if newer else
                                                   "Use a new --root, or move the old root aside"))
        _CHECKED.add(self.layout.root)

    def _format(self) -> str | None:
        """The root's format (the ``topics`` table's property; None before the table exists)."""
        path = self.path("topics")
        if not table_exists(self.spark, path):
            return None
        txn = commits.start(self.spark, path, "the control table topics")
        try:
            return txn.configuration().get(FORMAT_PROP, "")
        finally:
            txn.release()

    def _raise_format(self) -> None:
        """A format-2 root raised to this release's format before its first write here."""
        path = self.path("topics")

        def attempt() -> None:
            txn = commits.start(self.spark, path, "the control table topics")
            if txn.configuration().get(FORMAT_PROP) == str(FORMAT_VERSION):
                txn.release()
                return
            txn.commit_properties({FORMAT_PROP: str(FORMAT_VERSION)})

        retry_on_conflict(attempt)

    def ensure(self) -> None:
        """Create any missing control table (safe to race: a lost race finds the table made)."""
        if getattr(self, "_ensured", False):
            return
        self.check_format()
        if self.layout.root not in _RAISED:
            if self._format() not in (None, str(FORMAT_VERSION)):
                self._raise_format()
            _RAISED.add(self.layout.root)
        for name in TABLES:
            if name not in ON_DEMAND:
                self.ensure_table(name)
        self._ensured = True

    def ensure_table(self, name: str) -> None:
        """Create the control table ``name`` if missing (safe to race); give one made by an earlier
        release the columns added since (``ADDED_COLUMNS``)."""
        path = self.path(name)
        if path in _COMPLETE:
            return
        create_table(self.spark, path, struct_of(self.spark, TABLES[name]), {**COMMON_PROPERTIES, **TABLE_PROPERTIES.get(name, {})},
                     what=f"the control table {name}")
        self._add_columns(name)
        _COMPLETE.add(path)

    def _add_columns(self, name: str) -> None:
        """Give a table made before some of its columns those columns (``commit_order``: old rows stay
        ordered by row tracking, new ones carry a label). Safe to race: a loser finds the column."""
        path = self.path(name)
        wanted = ADDED_COLUMNS.get(name, {})
        if not wanted:
            return
        have = set(self._columns(path))
        if all(column in have for column in wanted):
            return
        here, storage = delta_rs_reads(self.spark, path)
        here = here and not self.row_tracked(name)  # delta-rs writes no row-tracked table
        for column, kind in wanted.items():
            if column in have:
                continue
            if here:  # no JVM needed: delta-rs adds it (the type read as ``arrow_rows`` reads it)
                from deltalake import DeltaTable, Field

                try:
                    field = arrow_rows(self.spark, [], f"`{column}` {kind}").schema.field(column)
                    DeltaTable(path, storage_options=storage).alter.add_columns(Field.from_arrow(field))
                    continue
                except Exception:  # noqa: BLE001 - a racing adder, or a table delta-rs cannot alter: Delta's engine
                    if column in self._columns(path):
                        continue
            try:
                self.spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({column} {kind})")
            except Exception:
                if column not in self._columns(path):
                    raise

    def _columns(self, path: str) -> list[str]:
        here, storage = delta_rs_reads(self.spark, path)
        if here:
            return [field.name for field in rs_tables.open_table(path, storage).schema().fields]
        return self.spark.read.format("delta").load(path).columns

    def exists(self, name: str) -> bool:
        return table_exists(self.spark, self.path(name))

    def read(self, name: str) -> DataFrame:
        """The table's rows (none if it does not exist yet; ``_metadata`` only when it does)."""
        self.check_format()
        if not self.exists(name):
            return rows_frame(self.spark, [], TABLES[name])
        return self.spark.read.format("delta").load(self.path(name))

    def rows_at(self, name: str, version: int) -> list[dict]:
        """The rows of a table not ordered by commit (``topics``, ``group_generations``) as of
        ``version`` (from ``table_version``; none below 0), through ``rows``: delta-rs on a local
        root, about 0.02 s, where Spark rebuilds a table's state for each new version with a job
        (about 1 s), and these tables get a version with every topic change and generation."""
        return [] if version < 0 else self.rows(name, version)

    def rows(self, name: str, version: int | None = None) -> list[dict]:
        """A small table's rows (``topic_configs``, ``record_deletions``), as of ``version`` (default:
        the latest); none if it does not exist yet. Through delta-rs where ``delta_rs_reads``."""
        self.check_format()
        path = self.path(name)
        here, storage = delta_rs_reads(self.spark, path)
        if here:
            return rs_reader.rows(path, version, storage)
        if not self.exists(name):
            return []
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return [r.asDict(recursive=True) for r in reader.load(path).collect()]

    def row_tracked(self, name: str) -> bool:
        """Whether an ordered table is ordered by row tracking (made before ``commit_order``): a
        table property, read by delta-rs where lakelog reads logs itself (``log_read_directly``: a
        local or S3 root), else through SQL or a transaction of Delta's."""
        path = self.path(name)
        if path not in _ROW_TRACKED:
            here, storage = log_read_directly(self.spark, path)
            if not (rs_reader.exists(path, storage) if here else self.exists(name)):
                return False
            if here:
                _ROW_TRACKED[path] = rs_reader.row_tracked(path, storage)
            elif is_connect(self.spark):  # no JVM to open a transaction in: the properties through SQL
                _ROW_TRACKED[path] = properties(self.spark, path).get("delta.enableRowTracking") == "true"
            else:
                conf = DeltaTransaction.start(self.spark, path).configuration()
                _ROW_TRACKED[path] = conf.get("delta.enableRowTracking") == "true"
        return _ROW_TRACKED[path]

    def reads_without_spark(self, name: str) -> bool:
        """Whether ``ordered_rows`` reads this ordered table with delta-rs (``delta_rs_reads``, labels)."""
        return delta_rs_reads(self.spark, self.path(name))[0] and not self.row_tracked(name)

    def ordered(self, name: str, version: int | None = None) -> DataFrame:
        """An ordered table's rows (``ORDERED_TABLES``) with ``_order``, their place in commit
        order: the one place that chooses between labels and row tracking. ``version``: as of
        that table version (the table must exist), else the latest."""
        frame = self.read(name) if version is None else (
            self.spark.read.format("delta").option("versionAsOf", version).load(self.path(name)))
        order = F.col(ROW_COMMIT_VERSION) if self.row_tracked(name) else F.col(COMMIT_ORDER_COLUMN)
        return frame.withColumn("_order", order)

    def ordered_rows(self, name: str, version: int | None = None) -> list[dict]:
        """An ordered table's rows with ``_order`` as plain rows, as of ``version`` (default: the
        latest). Through delta-rs where ``delta_rs_reads`` (no Spark job); otherwise, and
        for tables ordered by row tracking (delta-rs has no row tracking), through Spark."""
        self.check_format()
        path = self.path(name)
        if version is not None and version < 0:
            return []
        if self.reads_without_spark(name):
            storage = delta_rs_reads(self.spark, path)[1]
            return [{**r, "_order": r[COMMIT_ORDER_COLUMN]} for r in rs_reader.rows(path, version, storage)]
        if not self.exists(name):
            return []
        return [row.asDict(recursive=True) for row in self.ordered(name, version).collect()]

    def position_rows(self, *columns: str, where=None) -> dict[tuple[str, str, int], dict]:
        """``latest_position_rows`` of offset_commits, with ``columns`` of each position row:
        over every row where delta-rs reads the table, else over ``reduced_commits``. ``where``, a
        Spark condition, narrows what Spark reduces; it must keep every row the caller's
        positions depend on (their group's, and the deletions cutting them off)."""
        if not self.exists("offset_commits"):
            return {}
        if self.reads_without_spark("offset_commits"):
            return latest_position_rows(self.ordered_rows("offset_commits"))
        frame = self.ordered("offset_commits")
        columns = tuple(c for c in columns if c in frame.columns)  # a table of an earlier release lacks some
        return latest_position_rows(reduced_commits(frame if where is None else frame.where(where), *columns))

    def append(self, name: str, rows: list[dict]) -> None:
        """Append rows in one commit: blind, except that an ordered table's rows are labelled
        (``write_labelled``), and a fence raised meanwhile makes it write them again."""
        self.ensure()

        def attempt() -> None:
            txn = self.rows_transaction(name)
            if name in ORDERED_TABLES:
                self.write_labelled(txn, name, rows)
            else:
                txn.write_rows(arrow_rows(self.spark, rows, TABLES[name]))
            txn.commit({})

        retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    def rows_transaction(self, name: str) -> "DeltaTransaction | RsTransaction":
        """A transaction for rows and application versions (no table properties with rows): the
        engine ``log_store.commits`` chooses, but Delta's for a table ordered by row tracking,
        which delta-rs does not write."""
        if self.row_tracked(name):
            return DeltaTransaction.start(self.spark, self.path(name))
        return commits.start(self.spark, self.path(name), f"the control table {name}")

    def insert_versioned(self, name: str, prop: str, version: int, row: dict, metadata: str) -> bool:
        """Insert ``row`` as version ``version`` of what ``prop`` counts (``counted``): True if it
        became that version, False if the count already reached it. The count is read and raised
        in the row's own commit, so of two writers of one version one wins (retried on conflicts
        with others)."""
        self.ensure_table(name)

        def attempt() -> bool:
            txn = self.rows_transaction(name)
            if counted(txn, prop) >= version:
                txn.release()
                return False
            txn.write_rows(arrow_rows(self.spark, [row], TABLES[name]))
            txn.commit({prop: version}, metadata)
            return True

        return retry_on_conflict(attempt, attempts=20, backoff_ms=10)

    def write_labelled(self, txn: "DeltaTransaction | RsTransaction", name: str, rows: list[dict]) -> None:
        """Write ``rows`` into ``txn`` with their ``commit_order``: one more than the version ``txn`` read."""
        label = txn.read_version + 1
        txn.write_rows(arrow_rows(self.spark, [{**r, COMMIT_ORDER_COLUMN: label} for r in rows], TABLES[name]))

    # -- SQL ---------------------------------------------------------------------------------
    CONTROL_VIEWS = ("topic_history", "replica_history", "topics", "partitions", "offset_commits", "group_offsets",
                     "expired_records",
                     "group_generations", "groups", "group_members", "topic_configs", "record_deletions",
                     "key_compactions", "transaction_history", "transactions")

    def register_views(self, wanted: set[str] | None = None) -> list[str]:
        """Register stable SQL names for the control plane and every topic's log; return them.
        A log's view holds its rows as they are, transactions' markers too (``control`` says
        commit or abort; null on a record, also in a log without the column yet).

        ``wanted``: only these names (lower case), as ``lakelog sql`` passes the words of its
        query: each view costs a Delta snapshot load, and a query names the few it reads.
        """
        want = (lambda name: True) if wanted is None else (lambda name: name.lower() in wanted)
        views: dict[str, DataFrame] = {}

        def view(name: str) -> DataFrame:  # built once, and only if wanted or needed by a wanted one
            if name not in views:
                views[name] = self._view(name, view)
            return views[name]

        registered = []
        for name in self.CONTROL_VIEWS:
            if want(name):
                view(name).createOrReplaceTempView(name)
                registered.append(name)
        if wanted is None or any(w.startswith("log_") for w in wanted):
            locations = {r["topic"]: r["location"] for r in view("topics").select("topic", "location").collect()}
            for name, topic in log_view_names(list(locations)).items():
                if want(name):
                    log = self.spark.read.format("delta").load(locations[topic])
                    if CONTROL_COLUMN not in log.columns:  # a log of an earlier release before its first marker
                        log = log.withColumn(CONTROL_COLUMN, F.lit(None).cast("string"))
                    log.createOrReplaceTempView(name)
                    registered.append(name)
        return sorted(registered)

    def query(self, query: str, limit: int) -> list[dict]:
        """``lakelog sql`` on Spark: ``query`` over the views it names, as rows."""
        from pyspark.errors.exceptions.captured import CapturedException

        self.register_views(views_named(query))
        try:
            return [r.asDict(recursive=True) for r in self.spark.sql(query).limit(limit).collect()]
        except CapturedException as exc:  # Spark's own errors: parse, analysis, ANSI (division by zero, casts)
            raise LakelogError(f"SQL error: {str(exc).splitlines()[0]}") from None

    def _view(self, name: str, view) -> DataFrame:
        """One control-plane view; ``view`` gives the others it is built from."""
        if name in ("topic_history", "offset_commits", "group_generations", "group_members", "topic_configs",
                    "record_deletions", "key_compactions", "replica_history", "transaction_history"):
            return self.read({"topic_history": "topics", "replica_history": "topic_replicas",
                              "transaction_history": "transactions"}.get(name, name))
        if name == "group_offsets":  # no table yet: an empty view with the view's columns
            if not self.exists("offset_commits"):
                return rows_frame(self.spark, [], GROUP_OFFSETS_SCHEMA)
            rows = self.position_rows("committed_at", "generation").values()
            return rows_frame(self.spark, [{c: r[c] for c in GROUP_OFFSETS_COLUMNS} for r in rows], GROUP_OFFSETS_SCHEMA)
        if name in DERIVED_VIEWS:
            for source in DERIVED_VIEWS[name][0]:
                view(source).createOrReplaceTempView(source)
            return self.spark.sql(DERIVED_VIEWS[name][1])
        raise KeyError(name)
