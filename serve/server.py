"""The listener: one asyncio loop owns every connection (docs/serve.md).

A connection's requests are read as they arrive and answered in the order they came: each is a
task, and one writer per connection awaits them in order. A frame larger than
``serve.max_request_bytes`` (before SASL authentication, ``serve.sasl_max_receive_bytes``) or one
that is not a request closes the connection (Kafka's broker does the same); the server keeps
serving every other connection. What clients may hold in all (connections, bytes of frames being
read, time idle) is bounded as docs/serve.md's "Limits" says.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from control_plane.settings import ControllerSettings, ReplicationSettings
from log_store.errors import InvalidConfigurationError, LakelogError
from log_store.session import activate
from serve.cluster import Broker, Cluster
from serve.consumer_groups import ConsumerGroups
from serve.context import ServeContext
from serve.security import allowed, scram_credentials, tls_context, tls_principal
from serve.group_tables import GroupRecords
from serve.log_reads import LogReads
from serve.groups import Coordinator
from serve.gates import KafkaGates
from serve.connections import Admission, DecodedBytes, FrameBytes
from serve.settings import ServeSettings, split_address
from serve.wire import (
    API_VERSIONS_KEY, AT_ONCE_BYTES, MalformedRequest, Request, UnsupportedVersion, read_request, response_frame,
)

log = logging.getLogger("lakelog.serve")
_SIZE = struct.Struct(">i")
READ_BYTES = 1 << 20  # a large frame is read in pieces of at most this many bytes
ENCODE_APART_ELEMENTS = 1000  # the answer to a request of more array elements is written on the pool
Handler = Callable[["Server", "Connection", Request], Awaitable[dict | None]]


@dataclass
class Connection:
    """One client connection: who it is (after SASL, its principal) and where it comes from."""

    peer: str
    principal: str = "User:ANONYMOUS"
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    closing: bool = False  # close once the answer being written is out (a failed authentication)
    state: dict = field(default_factory=dict)
    active: float = field(default_factory=time.monotonic)  # when bytes last came or went
    pending: int = 0  # requests read and not yet answered


class Server:
    """A Kafka-protocol server over one root. ``start`` in a running loop, or ``run_in_thread``."""

    def __init__(self, spark: SparkSession, root: str, settings: ServeSettings | None = None,
                 controller: ControllerSettings | None = None, replication: ReplicationSettings | None = None) -> None:
        """``controller``: the settings topic changes run with (``delete_partition_enable``);
        ``replication``: those ``acks=all`` produces on replicated topics run with (the time lag)."""
        from serve.apis import handlers
        from serve.batcher import Batcher
        from serve.transactions import Transactions
        from serve.waits import Waits

        self.settings = settings or ServeSettings()
        self.controller_settings = controller or ControllerSettings()
        self.ctx = ServeContext(spark, root, self.settings, replication)
        self.handlers: dict[int, tuple[int, int, Handler]] = handlers()
        self.versions = {k: (lo, hi) for k, (lo, hi, _h) in self.handlers.items()}
        self.scram = scram_credentials(self.settings.users) if self.settings.security_protocol.startswith("SASL") else {}
        self.batcher = Batcher(self.ctx)
        self.waits = Waits(self.ctx)
        self.reads = LogReads()
        self.record_bytes: dict[tuple[str, int], float] = {}  # (topic, partition) -> bytes a row of its last read took
        self.batcher.on_commit = self.waits.notify
        self.cluster = Cluster(spark, root, self.settings.session_timeout_ms)
        self.records = GroupRecords(self.ctx)
        self.gates = KafkaGates(self.ctx, self.records)
        self.coordinator = Coordinator(self.records, self.settings.group_initial_rebalance_delay_ms, self.gates.served)
        self.consumer_groups = ConsumerGroups(self.records, self.ctx, self.settings, self.gates)  # KIP-848's
        self.transactions = Transactions(self.ctx)  # transactional producers' (serve/transactions.py)
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[asyncio.Task, Connection] = {}
        self.admission = Admission(self.settings.max_connections, self.settings.max_connections_per_ip)
        self.frame_bytes = FrameBytes(self.settings.queued_max_request_bytes, AT_ONCE_BYTES)
        self.decoded = DecodedBytes(self.settings.queued_max_request_bytes, max(1, self.settings.threads // 2))
        self.host, self.port = split_address(self.settings.listen)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self.ctx.loop = asyncio.get_running_loop()
        tls = None
        if self.settings.security_protocol.endswith("SSL"):
            tls = tls_context(self.settings.ssl_certfile, self.settings.ssl_keyfile, self.settings.ssl_cafile,
                              self.settings.ssl_client_auth)
        # The port is bound first (port 0 picks one, which the registration names), and connections
        # are taken only once the server is registered and running: a client reconnecting to a
        # server started again on its port is refused until then, and retries, rather than reaching
        # a server that cannot yet name itself in Metadata.
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=2**20, backlog=1024,
                                                      ssl=tls, start_serving=False)
        except OSError as exc:  # a port taken, an address not this host's: the user's to change
            raise InvalidConfigurationError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}; give another --listen HOST:PORT "
                "(serve.listen), or stop what holds it") from None
        self.port = self._server.sockets[0].getsockname()[1]
        host, port = self.advertised
        self.ctx.node_id = await self.ctx.run(self.cluster.register, host, port, self.settings.rack, self.settings.node_id,
                                              self.settings.security_protocol)
        self.batcher.start()
        self.waits.start()
        self.coordinator.start()
        self.consumer_groups.start()
        self.transactions.start()
        self._beating = asyncio.get_running_loop().create_task(self._beat())
        self._sweeping = asyncio.get_running_loop().create_task(self._sweep())
        await self._server.start_serving()
        log.info("lakelog serve listening on %s:%s", self.host, self.port)

    @property
    def advertised(self) -> tuple[str, int]:
        if self.settings.advertised:
            return split_address(self.settings.advertised)
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return host, self.port

    def brokers(self) -> list[Broker]:
        """The live servers over this root, as Metadata lists them."""
        return self.cluster.brokers()

    async def _beat(self) -> None:
        """Tick into the root and look at the other servers, every ``serve.heartbeat_interval_ms``;
        drop the groups whose lease another server took."""
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)
            try:
                await self.ctx.run_beat(self.cluster.beat)
                for name in set(self.coordinator.groups) | set(self.consumer_groups.groups):
                    if not await self.ctx.run_beat(self.cluster.holds, name):
                        self.coordinator.drop(name)
                        self.consumer_groups.drop(name)
            except Exception:  # noqa: BLE001 - a tick that failed is tried again next time
                log.exception("a heartbeat into the root failed")

    def groups_reading(self, client_id: str, host: str, topic: str | None = None, departed: bool = True) -> list[str]:
        """The groups coordinated here (either protocol) whose gates a fetch from ``client_id`` on
        ``host`` for ``topic`` is held to (docs/serve.md, "Which group a fetch is for"); without
        ``departed``, only those it is a member of now."""
        found = set(self.coordinator.groups_reading(client_id, host, topic, departed))
        return sorted(found | self.consumer_groups.groups_reading(client_id, host, topic, departed))

    async def coordinator_of(self, group: str) -> Broker | None:
        """The server that coordinates ``group`` (FindCoordinator): the lease's live holder, or this one."""
        node = await self.ctx.run(self.cluster.coordinator, group)
        return self.cluster.broker(node)

    async def coordinates(self, group: str) -> bool:
        """Whether this server holds ``group``'s lease now."""
        return await self.ctx.run(self.cluster.holds, group)

    def allowed(self, conn: Connection, operation: str, resource: str, name: str) -> bool:
        """Whether ``conn``'s principal may do ``operation`` on the ``resource`` named ``name``."""
        return allowed(self.settings.acls, self.settings.super_users, conn.principal, operation, resource, name)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.batcher.stop()
        self.coordinator.stop()
        self.consumer_groups.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.transactions.stop)
        unmarked = None
        if getattr(self, "_sweeping", None):
            self._sweeping.cancel()
        if getattr(self, "_beating", None):
            self._beating.cancel()
            try:
                await self.ctx.run(self.cluster.stopped)
            except Exception as exc:  # noqa: BLE001 - the rest of the stop still runs, then it is said in one line
                unmarked = exc
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        self.waits.stop()
        # what is left (a coordinator's timer, a group write's wait, a connection's sender) ends here,
        # not destroyed unfinished with the loop
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=10)
        self.ctx.close()
        if unmarked is not None:
            from log_store.delta_errors import translate

            reason = str(translate(unmarked)) if not isinstance(unmarked, LakelogError) else str(unmarked)
            raise LakelogError(
                f"the server stopped without marking itself down in the root ({reason[:240]}); "
                f"the other servers stop listing it after serve.session_timeout_ms. A SIGTERM sent to the whole "
                f"process group stops Spark's JVM with it: send SIGTERM (or Ctrl-C) to the lakelog process alone")

    def run_forever(self, on_listening=None) -> None:
        """Serve until SIGTERM or SIGINT, then stop: no new request is read, queued batches are
        committed and answered. ``on_listening(server)`` is called once the port is open."""
        import signal

        async def main() -> None:
            await self.start()
            if on_listening is not None:
                on_listening(self)
            done = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, done.set)
            await done.wait()
            await self.stop()

        asyncio.run(main())

    def run_in_thread(self) -> "Server":
        """Serve from a background thread (tests, benchmarks); returns once listening."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def main() -> None:
            activate(self.ctx.spark)
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=main, name="lakelog-serve-loop", daemon=True)
        self._thread.start()
        if not ready.wait(60):
            raise RuntimeError("the server did not start listening within 60 s")
        return self

    def stop_thread(self) -> None:
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None

    # -- connections -------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = peer[0] if peer else "?"
        refused = self.admission.enter(address)
        if refused:  # closed as soon as accepted (docs/serve.md, "Limits")
            log.info("refusing a connection from %s: %s", address, refused)
            writer.transport.abort()
            return
        task = asyncio.current_task()
        conn = Connection(peer=f"{peer[0]}:{peer[1]}" if peer else "?",
                          authenticated=not self.settings.security_protocol.startswith("SASL"))
        conn.principal = tls_principal(writer.get_extra_info("peercert")) or conn.principal
        self._connections[task] = conn
        answers: asyncio.Queue = asyncio.Queue(maxsize=self.settings.max_in_flight)
        sender = asyncio.create_task(self._send(answers, writer, conn))
        try:
            while True:
                head = await reader.readexactly(4)
                conn.active = time.monotonic()
                size = _SIZE.unpack(head)[0]
                limit = self.settings.max_request_bytes
                if not conn.authenticated:  # Kafka's sasl.server.max.receive.size (CVE-2022-34917)
                    limit = min(limit, self.settings.sasl_max_receive_bytes)
                if size < 8 or size > limit:
                    log.warning("closing %s: a request frame of %d bytes (limit %d%s)", conn.peer, size, limit,
                                "" if conn.authenticated else " before authentication")
                    break
                owner = address if conn.authenticated else ""  # all the unauthenticated: one owner
                await self.frame_bytes.take(size, owner)
                try:
                    frame = await self._read_frame(reader, size, conn)
                    try:
                        parsed: Request | Exception = await read_request(frame, self.versions)
                    except (UnsupportedVersion, MalformedRequest) as exc:  # answered in turn
                        parsed = exc
                    del frame
                finally:
                    self.frame_bytes.give(size, owner)
                conn.pending += 1
                await answers.put(asyncio.create_task(self._answer(conn, parsed)))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            sender.cancel()
            for pending in answers._queue:  # noqa: SLF001 - the answers nobody will write
                if pending is not None:
                    pending.cancel()
            writer.close()
            self._connections.pop(task, None)
            self.admission.leave(address)

    @staticmethod
    async def _read_frame(reader: asyncio.StreamReader, size: int, conn: Connection) -> bytes | memoryview:
        """A frame's ``size`` bytes; a large one in pieces, each one the connection's activity."""
        if size <= AT_ONCE_BYTES:
            return await reader.readexactly(size)
        frame = bytearray()  # grown as bytes come: a frame announced and never sent takes no memory
        while len(frame) < size:
            piece = await reader.read(min(size - len(frame), READ_BYTES))
            if not piece:
                raise asyncio.IncompleteReadError(b"", size)
            frame += piece
            conn.active = time.monotonic()
        return memoryview(frame).toreadonly()

    async def _sweep(self) -> None:
        """Close each connection that has sent and been sent nothing for
        ``serve.connections_max_idle_ms`` and has no request in progress (Kafka's connections.max.idle.ms)."""
        idle = self.settings.connections_max_idle_ms / 1000
        while True:
            await asyncio.sleep(min(idle / 4, 1.0))
            now = time.monotonic()
            for task, conn in list(self._connections.items()):
                if conn.pending == 0 and now - conn.active > idle:
                    log.info("closing %s: idle for %.0f s", conn.peer, now - conn.active)
                    task.cancel()

    async def _send(self, answers: asyncio.Queue, writer: asyncio.StreamWriter, conn: Connection) -> None:
        """Write each answer in request order; a request that failed closes the connection."""
        while True:
            task = await answers.get()
            if task is None:
                return
            try:
                frame = await task
            except Exception:
                log.exception("a request failed; closing the connection")
                writer.close()
                return
            if frame is _CLOSE:
                writer.close()
                return
            if frame:
                writer.write(frame)
                await writer.drain()
            conn.pending -= 1
            conn.active = time.monotonic()
            if conn.closing:
                writer.close()
                return

    async def _answer(self, conn: Connection, request: Request | Exception) -> bytes | None | object:
        if isinstance(request, UnsupportedVersion):
            if request.api_key == API_VERSIONS_KEY:  # KIP-511: answer v0 with the versions served
                from serve.apis.meta import api_versions_body

                return response_frame(API_VERSIONS_KEY, 0, request.correlation_id,
                                      api_versions_body(self, error="UNSUPPORTED_VERSION"))
            log.warning("closing %s: %s", conn.peer, request)
            return _CLOSE
        if isinstance(request, Exception):
            log.warning("closing %s: %s", conn.peer, request)
            return _CLOSE
        if not conn.authenticated and request.api_key not in PRE_AUTHENTICATION:
            log.warning("closing %s: API %d before SASL authentication", conn.peer, request.api_key)
            return _CLOSE
        _lo, _hi, handler = self.handlers[request.api_key]
        started = time.monotonic()
        values = await handler(self, conn, request)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: API %d v%d answered in %.0f ms", conn.peer, request.api_key, request.version,
                      (time.monotonic() - started) * 1000)
        if values is None:  # acks=0: no answer
            return None
        if values is _CLOSE:
            return _CLOSE
        if request.elements > ENCODE_APART_ELEMENTS:  # as long to write as it was to read: off the loop
            return await self.ctx.run(response_frame, request.api_key, request.version, request.correlation_id, values)
        return response_frame(request.api_key, request.version, request.correlation_id, values)


_CLOSE = object()
PRE_AUTHENTICATION = {18, 17, 36}  # ApiVersions, SaslHandshake, SaslAuthenticate
CLOSE = _CLOSE  # what a handler returns to close the connection without an answer
