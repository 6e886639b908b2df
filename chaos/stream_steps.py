"""A schedule's streams. The reader (``schedule.StreamPlan``): a Structured Streaming query through
format("lakelog") run again and again from its checkpoint, killed with ``kill -9`` and started
again, on a classic session (a JVM of its own) or a Spark Connect session (a server the schedule
starts, replaced by a spare one after each kill); its group's positions count in the drain as a group's.
The writer (``Schedule.stream_writer``): a query writing its input through format("lakelog"),
one of the schedule's producers."""

from __future__ import annotations

import signal
import threading

from chaos.processes import kill_tree
from chaos.schedule import ProducerPlan, StreamPlan

SERVER_START_TIMEOUT_S = 240.0


class StreamSteps:
    """The runner's stream (a part of ``chaos.runner.Runner``)."""

    def stream_init(self) -> None:
        self.stream_run = 0
        self.connect = None  # the Connect server the stream uses (a connect stream)
        self.spare = None  # ... and one started beside it, which takes over when it is killed
        self.spare_starting: threading.Thread | None = None

    @property
    def stream_sink(self) -> str:
        return f"{self.root}/sinks/{self.s.stream.group}"

    @property
    def stream_checkpoint(self) -> str:
        return str(self.dir / "stream-checkpoint")

    def stream_groups(self) -> dict[str, str]:
        """The stream's group and its topic, for the drain."""
        return {self.s.stream.group: self.s.topic} if self.s.stream else {}

    def stream_prepare(self) -> None:
        """A connect stream's server, started before the schedule's clock starts (a JVM start would
        otherwise push the stream's first plan past the schedule's first resizes), and its spare."""
        if self.s.stream and self.s.stream.session == "connect":
            try:
                self.connect = self._start_server()
            except RuntimeError as exc:
                self.result.problems.append(f"the Spark Connect server did not start: {exc}")
            self._start_spare()

    def _start_server(self):
        from log_store.connect_server import ConnectServer

        return ConnectServer(start_timeout=SERVER_START_TIMEOUT_S).__enter__()

    def _start_spare(self) -> None:
        """A server started in the background, so a killed one is replaced within seconds, as a
        crashed driver's cluster restarts it (a JVM start takes half a minute on 2 busy cores)."""
        def start() -> None:
            try:
                self.spare = self._start_server()
            except RuntimeError as exc:
                self.result.problems.append(f"a spare Spark Connect server did not start: {exc}")

        self.spare_starting = threading.Thread(target=start, daemon=True)
        self.spare_starting.start()

    def _take_spare(self) -> None:
        if self.connect is None and self.spare is not None:
            self.connect, self.spare = self.spare, None
            self.log(f"the spare Spark Connect server ({self.connect.url}) serves the stream")
            self._start_spare()

    def stream_start(self, base: float) -> None:
        plan = self.s.stream
        if plan is None:
            return
        self.at(base + plan.start_at, lambda: self.start_stream(plan))
        for when in plan.kills:
            self.at(base + when, lambda: self.kill_stream(plan))

    def start_stream(self, plan: StreamPlan) -> None:
        if self.stopping:
            return
        if plan.session == "connect":
            self._take_spare()
            if self.connect is None:  # the spare is still starting
                self.at(self.now() + 1, lambda: self.start_stream(plan))
                return
        self.stream_run += 1
        name = f"{plan.group}.{self.stream_run}"
        args = {"group": plan.group, "sink": self.stream_sink, "checkpoint": self.stream_checkpoint,
                "stop_file": str(self.dir / "stop" / plan.group), "max_offsets": plan.max_offsets,
                "pause_s": plan.pause_s}
        if plan.session == "connect":
            args["remote"] = self.connect.url
        else:
            args["own_jvm"] = True  # a kill takes its driver (the JVM) along

        def done(rc: int) -> None:
            if rc == 0:
                return
            if rc == 1 and self.read_at_a_lost_root(name, run.started):
                self.result.operations["stream run failed: a root lost between a batch's plan and its read"] += 1
            elif rc != -signal.SIGKILL:
                self.unexpected(name, rc)
            self.at(self.now() + plan.restart_after, lambda: self.start_stream(plan))

        run = self.spawn(name, "stream_read", args, done)

    def read_at_a_lost_root(self, name: str, started: float) -> bool:
        """Whether stream run ``name`` failed as docs/replication.md says a stream fails when a root
        is lost between a micro-batch's plan and its read (lakelog's ``LeaderNotAvailableError``,
        ``reading.read_lost``) while a root was lost since it ``started``: then it is run again on its
        checkpoint, as the error says. A file missing while no root was lost is lakelog's own
        removal of a file a planned batch reads: an anomaly."""
        event = self.last_event(name)
        return (event.get("event") == "error" and event.get("error") == "LeaderNotAvailableError"
                and self.root_lost_since(started))

    def start_stream_writer(self, plan: ProducerPlan, run: int) -> None:
        """The stream writer: its query runs to its end, from its checkpoint after a kill."""
        name = f"{plan.producer_id}.{run}"
        args = {"producer_id": plan.producer_id, "input": str(self.dir / "inputs" / f"{plan.producer_id}.jsonl"),
                "batch": plan.batch, "source": str(self.dir / "stream-writer-source"),
                "checkpoint": str(self.dir / "stream-writer-checkpoint"), "own_jvm": True,
                "ack_file": str(self.dir / "acks" / f"{plan.producer_id}.jsonl")}

        def done(rc: int) -> None:
            if rc == 0:
                self.pending_producers.discard(plan.producer_id)
                self.log(f"{plan.producer_id} (stream) finished after {run + 1} runs")
                return
            if rc != -signal.SIGKILL:
                self.unexpected(name, rc)
            self.at(self.now() + self.rng.uniform(0.5, 2), lambda: self.start_stream_writer(plan, run + 1))

        actor = self.spawn(name, "stream_write", args, done)
        if run < len(plan.kill_after):
            def kill() -> None:
                if actor.proc.poll() is None:
                    kill_tree(actor.proc.pid)
                    self.log(f"kill -9 {name} (stream writer)")
                    self.result.faults["kill -9 stream writer (classic driver)"] += 1
            self.at(actor.started + plan.kill_after[run], kill)

    def kill_stream(self, plan: StreamPlan) -> None:
        """Kill the stream; one that is not running (killed a moment ago, its spare server still
        starting) is killed a few seconds after it runs again."""
        if self.stopping:
            return
        running = [a for a in self.actors.values() if a.kind == "stream_read" and a.proc.poll() is None]
        if not running:
            self.at(self.now() + self.rng.uniform(3, 8), lambda: self.kill_stream(plan))
            return
        for actor in running:
            kill_tree(actor.proc.pid)
            self.log(f"kill -9 {actor.name} (stream, {plan.session})")
        if plan.session == "classic":
            self.result.faults["kill -9 stream (classic driver)"] += 1
            return
        server, self.connect = self.connect, None
        if server is not None and server.proc is not None:
            kill_tree(server.proc.pid)
            server.__exit__()
            self.log("kill -9 the Spark Connect server (stream)")
            self.result.faults["kill -9 Spark Connect server (stream)"] += 1

    def stream_stop(self) -> None:
        """The end of a schedule: its Connect servers stop (after the stream has left)."""
        if self.spare_starting is not None:
            self.spare_starting.join(SERVER_START_TIMEOUT_S)
        for server in (self.connect, self.spare):
            if server is not None:
                server.__exit__()
        self.connect = self.spare = None
