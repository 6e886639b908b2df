"""What every handler of one server shares: the root, the Spark session, the settings, the thread
pool blocking work runs on, the topics as the control plane records them, and their logs'
snapshots (each read once per Delta version of the log)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.records import TopicRecord
from control_plane.topic_config import PLACEMENT, latest_config
from control_plane.topics import TopicAdmin
from log_store import rs_reader
from log_store.engine import app_versions, table_version
from log_store.names import producer_app_id
from log_store.checkpoints import DeferredCheckpoints, defer_here
from log_store.session import activate
from log_store.errors import (
    LOST_ROOT, LakelogError, LeaderNotAvailableError, StorageError, TopicDeletedError, UnknownTopicError,
)
from log_store.log_metadata import LogSnapshot, Mode
from log_store.object_store import delta_rs_reads
from log_store.topic_log import TopicLog
from serve.settings import ServeSettings
from serve.tail import Tail

T = TypeVar("T")
LIVE_MAX_AGE = 1.0  # seconds a list of the live topics answers for names not in it (``ServeContext.known``)


@dataclass(frozen=True)
class TopicView:
    """A live topic as a request sees it: its record, its log's snapshot, and its topic id."""

    record: TopicRecord
    snapshot: LogSnapshot
    topic_id: str
    leadership: Any = None  # a replicated topic's replica state, read before its leader's snapshot
    log_id: str = ""  # the Delta id of the log's table at the snapshot (a table made again has another)

    @property
    def name(self) -> str:
        return self.record.topic

    def writable(self) -> list[int]:
        """Partitions producers write: ReadWrite ones below the undeleted count."""
        meta = self.snapshot.metadata
        return [p for p, pm in meta.partitions.items()
                if pm.mode is Mode.READ_WRITE and p < meta.undeleted_partition_count]


def _newer(kept: TopicView, read: TopicView) -> bool:
    """Whether ``kept`` shows the same log as ``read`` at a later snapshot."""
    return (kept.record.location == read.record.location and kept.log_id == read.log_id
            and kept.snapshot.version > read.snapshot.version)


class ServeContext:
    """One server's shared state; blocking calls go through ``run`` (the thread pool)."""

    def __init__(self, spark: SparkSession, root: str, settings: ServeSettings, replication: Any = None) -> None:
        self.spark = spark
        self.root = root
        self.settings = settings
        self.replication_settings = replication  # control_plane.settings.ReplicationSettings (None: its defaults)
        self.admin = TopicAdmin(spark, root)
        # Commits on the pool leave Delta's checkpoints to a thread of their own: a checkpoint
        # written inside a commit held every batch queued for its topic for seconds.
        self.checkpoints = DeferredCheckpoints(spark)
        self.pool = ThreadPoolExecutor(max_workers=settings.threads, thread_name_prefix="lakelog-serve",
                                       initializer=self._pool_thread)
        # The server's liveness tick on a thread of its own: queued behind the pool's work (large
        # requests decoding, commits), a late tick makes the other servers take this one's groups.
        self.beats = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakelog-beat", initializer=self._pool_thread)
        self._snaps: dict[str, tuple[int, LogSnapshot, str, str]] = {}  # log path -> (version, snapshot, topic id, Delta id)
        self.tail = Tail(settings.tail_bytes)  # the records of this server's own commits (serve/tail.py)
        self._lock = threading.Lock()
        self._views: dict[str, tuple[TopicView, float]] = {}  # topic -> (view, when read, monotonic)
        self._ids: dict[str, str] = {}  # topic -> its topic id as last read (Metadata lists it while its log is lost)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.node_id = settings.node_id if settings.node_id is not None else 0
        self.started = time.monotonic()
        self._replicated: dict[str, tuple[bool, float]] = {}  # live topics only: a name a client makes up is not kept
        self._live: tuple[frozenset[str], float] | None = None  # the live topics' names, when listed (``known``)
        self._marks: dict[str, tuple] = {}  # topic -> ((path, version), high watermarks, when read, unread roots)
        self._failures: Any = None  # acks=all produces' failure clock, one for the server (the time lag)
        self._configs: tuple[int, list[dict]] | None = None  # (version, rows) of topic_configs, as last read

    def _pool_thread(self) -> None:
        activate(self.spark)
        defer_here(self.checkpoints)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the pool, awaited without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def run_beat(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the liveness tick's own thread."""
        return await asyncio.get_running_loop().run_in_executor(self.beats, fn, *args)

    # -- topics (called on the pool) ----------------------------------------------------------
    def topics(self) -> dict[str, TopicRecord]:
        """Every live topic's latest record."""
        return {t: r for t, r in self.admin.current().items() if not r.event.removes_topic}

    def view(self, topic: str, max_age: float = 0.0) -> TopicView:
        """``topic`` now, or as read at most ``max_age`` seconds ago (a commit this server made or
        saw since, ``forget``, makes it read again): UnknownTopicError (or TopicDeletedError) if it
        is not live. Looking costs two listings of Delta logs (about 0.1 s); an append checks the
        metadata in its own transaction anyway, and a fetch is woken by the commits it waits for."""
        with self._lock:
            hit = self._views.get(topic)
        if hit is not None and time.monotonic() - hit[1] <= max_age:
            return hit[0]
        if not self.known(topic):
            raise UnknownTopicError(f"unknown topic '{topic}'")
        first = self.admin.replica_state(topic) if self.replicated(topic) else None
        record = self.admin.get(topic)
        snap, topic_id, log_id = self.snapshot(record.location)
        if snap.metadata.deleted:
            raise TopicDeletedError(f"topic '{topic}' was deleted")
        view = TopicView(record, snap, topic_id, first, log_id)
        with self._lock:
            kept = self._views.get(topic)
            if kept is not None and _newer(kept[0], view):  # another thread read a later snapshot meanwhile:
                return kept[0]  # views only move forward (a fetch judged by an older one is answered out of range)
            self._views[topic] = (view, time.monotonic())
            self._ids[topic] = topic_id
        return view

    def snapshot(self, path: str) -> tuple[LogSnapshot, str, str]:
        """The log at ``path``'s latest snapshot, topic id and Delta table id (all from one Delta
        snapshot), read again only when its version moved (a listing of its Delta log tells)."""
        version = table_version(self.spark, path)
        if version < 0:
            raise StorageError(f"no topic log at {path}: its root is lost or not mounted")
        with self._lock:
            hit = self._snaps.get(path)
        if hit and hit[0] == version:
            return hit[1], hit[2], hit[3]
        snap, topic_id, log_id = TopicLog(self.spark, path).identified_snapshot()
        with self._lock:
            self._snaps[path] = (snap.version, snap, topic_id, log_id)
        return snap, topic_id, log_id

    def forget(self, path: str) -> None:
        """The log at ``path`` moved: the next view of its topic reads it again."""
        with self._lock:
            self._snaps.pop(path, None)
            for topic in [t for t, (v, _at) in self._views.items() if v.record.location == path]:
                del self._views[topic]

    def forget_topic(self, topic: str) -> None:
        """``topic`` was made, changed or deleted here: its view and the live topics are read again."""
        with self._lock:
            self._views.pop(topic, None)
            self._live = None

    def known(self, topic: str) -> bool:
        """Whether ``topic`` is among the live topics as listed at most ``LIVE_MAX_AGE`` seconds ago,
        listed again for a name not there in an older list. A request naming thousands of topics
        that do not exist then costs one listing, not several per name (a broker answers them from
        its metadata cache); a topic another process made is known here within that time."""
        with self._lock:
            live = self._live
        if live is not None and (topic in live[0] or time.monotonic() - live[1] <= LIVE_MAX_AGE):
            return topic in live[0]
        names = frozenset(self.topics())
        with self._lock:
            self._live = (names, time.monotonic())
        return topic in names

    def views(self, names: list[str] | None
              ) -> tuple[dict[str, TopicView], list[str], dict[str, tuple[TopicRecord, str | None]]]:
        """Views of ``names`` (every live topic if None), the names that are not live topics (looked
        up once: a Metadata request may name a hundred thousand that are not), and the records (and
        topic ids, as last read) of live topics whose log cannot be reached now (its root lost)."""
        live = self.topics()
        with self._lock:
            self._live = (frozenset(live), time.monotonic())
        wanted = sorted(live) if names is None else names
        found, missing, offline = {}, [], {}
        for name in wanted:
            if name not in live:
                missing.append(name)
                continue
            try:
                found[name] = self.view(name)
            except UnknownTopicError:
                missing.append(name)
            except LOST_ROOT:
                try:
                    offline[name] = (self.admin.get(name), self._ids.get(name))
                except LakelogError:  # the metadata root as well: nothing is known of it
                    missing.append(name)
        return found, missing, offline

    # -- producers and replicas (called on the pool) ---------------------------------------
    def producer_marks(self, path: str, producer_ids: list[str]) -> dict[str, int]:
        """Each of ``producer_ids``' mark in the log at ``path`` (-1: it has written nothing there),
        all from one read of the log's application versions (a read costs about as much for one id
        as for all of them, and a group commit may meet hundreds of new producers at once)."""
        known = app_versions(self.spark, path)
        return {pid: known.get(producer_app_id(pid), -1) for pid in producer_ids}

    def record_of(self, path: str, producer_id: str, sequence: int) -> tuple[int, int] | None:
        """(partition, offset) of ``producer_id``'s record numbered ``sequence`` in the log at ``path``
        (with delta-rs on a local or S3 root: ``delta_rs_reads``)."""
        here, storage = delta_rs_reads(self.spark, path)
        if here:
            return rs_reader.record_of(path, producer_id, sequence, storage)
        row = (TopicLog(self.spark, path).table().where((F.col("producer_id") == producer_id)
                                                        & (F.col("sequence") == sequence))
               .select("partition", "offset").first())
        return None if row is None else (int(row["partition"]), int(row["offset"]))

    def placement(self, view: TopicView) -> str:
        """Where the server places the topic's records (serve/placement.py): its ``lakelog.placement``,
        else the server's ``serve.placement``; the topic configs are read again when their table moved."""
        tables = self.admin.tables
        version = table_version(self.spark, tables.path("topic_configs"))
        with self._lock:
            hit = self._configs
        if hit is None or hit[0] != version:
            hit = (version, tables.rows_at("topic_configs", version))
            with self._lock:
                self._configs = hit
        return latest_config(hit[1], view.record.location)[1].get(PLACEMENT, self.settings.placement)

    def replicated(self, topic: str) -> bool:
        """Whether ``topic`` keeps replicas (looked up again every ten seconds; a name that is not a
        live topic keeps none)."""
        hit = self._replicated.get(topic)
        if hit is None and not self.known(topic):
            return False
        if hit is None or time.monotonic() - hit[1] > 10:
            hit = (self.admin.replica_state(topic) is not None, time.monotonic())
            self._replicated[topic] = hit
        return hit[0]

    def high_watermarks(self, view: TopicView) -> dict[int, int]:
        """What consumers may read of each partition: the log end, or on a replicated topic what
        every in-sync root holds (``Replication.high_watermark``, looked at again after
        ``serve.fetch_poll_ms``), with the replica state read again after the view's snapshot:
        LeaderNotAvailableError (the view forgotten) if the leader epoch moved since the view's
        first look (the readers' order, ``replication.reads``)."""
        ends = view.snapshot.log_ends
        if not self.replicated(view.name):
            return ends
        key = (view.record.location, view.snapshot.version)
        hit = self._marks.get(view.name)
        if hit is None or hit[0] != key or time.monotonic() - hit[2] > self.settings.fetch_poll_ms / 1000:
            from control_plane.replication.rules import same_leadership

            replication = self.replication()
            state = replication.state(view.name)
            if view.leadership is None or not same_leadership(view.leadership, state) \
                    or replication.path(state, state.leader) != view.record.location:
                self.forget_topic(view.name)
                raise LeaderNotAvailableError(f"'{view.name}' elected {state.leader} (epoch {state.leader_epoch}) "
                                              "while its log was read: read again")
            from control_plane.replication.reads import kept_of

            hit = (key, replication.high_watermark(view.name, ends, state, kept_of(view.snapshot)), time.monotonic(),
                   replication.unread(state))
            self._marks[view.name] = hit
        from control_plane.replication.rules import below_high_watermark

        return below_high_watermark(ends, hit[1], view.snapshot.earliest_offsets())

    def unread_roots(self, view: TopicView) -> list[str]:
        """The in-sync (or joining) roots of a replicated topic that this server has never read, as
        of its last ``high_watermarks(view)``: the high watermark stands at the log start until one
        is read or leaves the set, so "latest" is not known (ListOffsets: OFFSET_NOT_AVAILABLE)."""
        hit = self._marks.get(view.name)
        return list(hit[3]) if hit is not None else []

    def replication(self):
        """The replica operations, with one failure clock for every request: an in-sync follower whose
        copies fail leaves the set after the time lag, counted across produces."""
        from control_plane.replication.operations import Replication

        replication = Replication(self.spark, self.root, self.replication_settings)
        with self._lock:
            if self._failures is None:
                self._failures = replication.clock
        replication.clock = self._failures
        return replication

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.beats.shutdown(wait=False, cancel_futures=True)
        self.checkpoints.stop()
