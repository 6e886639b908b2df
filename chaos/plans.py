"""What a campaign schedule is made of: each actor's plan, as ``chaos.schedule`` draws it and the
runner, the steps and the checker read it (and a schedule's JSON in its workdir)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

@dataclass(frozen=True)
class ProducerPlan:
    producer_id: str
    records: int
    batch: int
    start_at: float
    kill_after: tuple[float, ...] = ()  # SIGKILL the n-th run this long after it started; then re-run
    crash_at: str | None = None  # the first run dies at this crash point; then re-run
    own_jvm: bool = False
    bad_input: bool = False  # a malformed line: must fail with exit 1 and write nothing


@dataclass(frozen=True)
class ControllerStep:
    at: float
    kind: str  # "alter", "tick", or one of UPKEEP
    partitions: int | None = None  # an alter's target; with ``change``, what the plan expected
    change: str | None = None  # "grow" or "shrink" by ``by``, from the count the topic has when the step runs
    by: int = 0
    delay: float | None = None
    pick: int = 0  # delete_records: which readable partition (modulo their number)
    fraction: float = 0.5  # delete_records: where below the log end, from the log start
    bytes: int = 0  # retention: retention.bytes for one tick
    racers: int = 1  # controllers running the same step at once
    crash_at: str | None = None  # the first racer dies here; the runner re-runs the step
    # elect: the leader's log is cut off this long first (lost, then returning); lag: a follower's
    cut_for: float = 0.0
    # replicate: the first copier waits this long between its reads and its commit (the pause point
    # replicate:after_write) while the schedule goes on; with racers=2 the second copier starts
    # once the first waits. elect with during_round: how long the round it races waits
    pause_for: float = 0.0
    during_round: bool = False  # elect: started while a copy round waits between its reads and its commit


@dataclass(frozen=True)
class MemberPlan:
    start_at: float
    kill_at: float | None = None  # SIGKILL, then a new member after restart_after
    restart_after: float = 2.0
    freeze_at: float | None = None  # SIGSTOP for freeze_for seconds: a zombie, expelled meanwhile
    freeze_for: float = 0.0
    lag_s: float = 0.0  # sleep after each batch: a lagging consumer
    crash_at: str | None = None


@dataclass(frozen=True)
class GroupPlan:
    name: str
    protocol: str
    assignor: str
    batch: int
    members: tuple[MemberPlan, ...]
    sink: str | None = None  # the sink's name under <root>/sinks (default: the group's name); groups may share one

    @property
    def sink_name(self) -> str:
        return self.sink or self.name


@dataclass(frozen=True)
class DecoyPlan:
    """A second topic and group whose names join like the main ones (group ``a`` on ``b.c``, group
    ``a.b`` on ``c``), writing into a main group's sink: what an identifier built by joining names
    with dots mixes up. Produced once and consumed by one member, without faults."""

    topic: str
    group: str
    sink: str
    partitions: int = 1
    records: int = 40


@dataclass(frozen=True)
class ServerKill:
    """A ``lakelog serve`` process killed with ``kill -9`` at ``at`` and started again (same node
    id, same port) ``down_for`` seconds later."""

    at: float
    server: int  # which of KafkaPlan's servers
    down_for: float


@dataclass(frozen=True)
class KafkaPlan:
    """Kafka's own clients through ``lakelog serve`` processes over the schedule's root: an
    idempotent librdkafka producer (``records`` keyed records of the input file, over
    ``produce_for`` seconds) and a classic consumer group (kafka-python or librdkafka) writing a
    Delta sink exactly once, while servers are killed and restarted and the topic resizes.

    With one server both go through it; with two, the group's server listens in PLAINTEXT and the
    producer's in SASL_PLAINTEXT (a server lists only the servers of its own listener): a group's
    fetches are held to the resize gates only by the server that coordinates it (docs/serve.md),
    so the group's clients must see that server alone."""

    servers: int
    kills: tuple[ServerKill, ...]
    linger_ms: int  # the servers' group commit
    records: int
    start_at: float
    produce_for: float
    client: str  # the group's: "kafka-python" or "librdkafka"
    assignor: str  # range, roundrobin, sticky (kafka-python) or cooperative-sticky
    batch: int  # max records a poll returns
    members: tuple[MemberPlan, ...]
    group: str = "kafka"
    producer_id: str = "kp"  # the name in the input's values ("kp:17"), what the checker judges it by
    session_ms: int = 10_000  # the consumers' session.timeout.ms


@dataclass(frozen=True)
class StreamPlan:
    """A Structured Streaming query reading the topic through format("lakelog") with the ``group``
    option into a Delta sink, under Trigger.AvailableNow, run again and again from its checkpoint
    until the schedule ends. ``session``: "classic" (lakelog's JVM source, in a JVM of its own, so
    a kill is a driver's crash) or "connect" (the Python data source, on a Spark Connect server the
    schedule starts; a kill takes the server down, its JVM and Python workers, and a spare server
    started beside it takes over)."""

    session: str
    start_at: float
    kills: tuple[float, ...] = ()  # SIGKILL at these moments; then a new run from the checkpoint
    restart_after: float = 2.0
    pause_s: float = 1.0  # between two runs of the query
    max_offsets: int = 100  # maxOffsetsPerTrigger: several micro-batches a run

    @property
    def group(self) -> str:
        return f"stream-{self.session}"


@dataclass(frozen=True)
class CompactionPlan:
    """The topic's ``cleanup.policy`` has ``compact`` (Kafka's log cleaning), with configs small
    enough that cleaning removes records within the schedule: superseded records at once
    (``min.compaction.lag.ms`` 0) and tombstones ``delete_retention_ms`` after the cleaning that
    first passed them. lakelog's own producers send a ``tombstones`` share of their records with a
    null value; the records of the Kafka producer, the stream writer and the decoy are named by
    their values and keep them."""

    policy: str  # "compact" or "compact,delete"
    delete_retention_ms: int
    dirty_ratio: float  # min.cleanable.dirty.ratio
    tombstones: float

    def configs(self) -> list[str]:
        return [f"cleanup.policy={self.policy}", "min.compaction.lag.ms=0",
                f"delete.retention.ms={self.delete_retention_ms}", f"min.cleanable.dirty.ratio={self.dirty_ratio}"]


@dataclass(frozen=True)
class CopierPlan:
    """A read-process-write copier (``actors.txn_copy``): group ``group`` reads the topic
    read_committed and writes each record to both of ``outputs`` (two copy topics: a transaction
    spanning topics) with the group's positions, ``batch`` records a transaction, under
    ``transactional_id``, until the drain stops it. Faults on its runs: a SIGKILL at ``kill_at``
    (mid-transaction: the successor's InitProducerId aborts what it left hanging), a first run
    dying at ``crash_at`` (a transaction's crash point), a zombie (frozen at ``freeze_at`` for
    ``freeze_for`` seconds while a successor under the same id starts: it must be fenced), and
    every ``abort_every``-th transaction aborted on purpose (0: none)."""

    transactional_id: str
    group: str
    outputs: tuple[str, ...]
    batch: int
    start_at: float
    kill_at: float | None = None
    crash_at: str | None = None
    freeze_at: float | None = None
    freeze_for: float = 0.0
    restart_after: float = 2.0
    abort_every: int = 0


@dataclass(frozen=True)
class TxnPlan:
    """Transactions in a schedule (``schedule._transactions``): copiers, the copy topics' partitions,
    ``controller tick``s (which finish decided transactions) and ``transactions abort``s (of a
    copier's id) racing them, and a read_committed group reading the first copier's first copy
    topic into the sink ``sink`` (its member killed at ``reader.kill_at`` if drawn)."""

    copiers: tuple[CopierPlan, ...]
    partitions: int
    ticks: tuple[float, ...] = ()
    aborts: tuple[tuple[float, int], ...] = ()  # (when, which copier)
    reader: MemberPlan | None = None
    group: str = "txn-rc"

    @property
    def topics(self) -> list[str]:
        return [t for c in self.copiers for t in c.outputs]

    @property
    def sink(self) -> str:
        return self.group


@dataclass(frozen=True)
class Schedule:
    seed: int
    partitions: int
    keys: int
    producers: tuple[ProducerPlan, ...]
    controller: tuple[ControllerStep, ...]
    groups: tuple[GroupPlan, ...]
    session_ms: int = 9_000
    heartbeat_ms: int = 1_500
    create_crash: bool = False  # the first topic creation dies between the log table and the record
    notes: list[str] = field(default_factory=list)
    topic: str = "chaos"
    decoy: DecoyPlan | None = None
    replicas: tuple[str, ...] = ()  # follower roots (names under the schedule's folder): a replicated topic
    kafka: KafkaPlan | None = None  # Kafka's clients through `lakelog serve` (``_kafka``)
    stream: StreamPlan | None = None  # a stream reading the topic (``_stream``)
    stream_writer: ProducerPlan | None = None  # a stream writing its input to the topic (``_stream``)
    compaction: CompactionPlan | None = None  # a compacted topic (``_compacted``)
    transactions: TxnPlan | None = None  # read-process-write copiers in transactions (``_transactions``)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        """The inverse of ``to_dict``: regression schedules are kept as JSON (tests/processes/chaos_regressions)."""
        return cls(**{**d, "producers": tuple(ProducerPlan(**{**p, "kill_after": tuple(p["kill_after"])})
                                              for p in d["producers"]),
                      "controller": tuple(ControllerStep(**c) for c in d["controller"]),
                      "groups": tuple(GroupPlan(**{**g, "members": tuple(MemberPlan(**m) for m in g["members"])})
                                      for g in d["groups"]),
                      "notes": list(d.get("notes", [])), "replicas": tuple(d.get("replicas", ())),
                      "decoy": DecoyPlan(**d["decoy"]) if d.get("decoy") else None,
                      "kafka": _kafka_from_dict(d["kafka"]) if d.get("kafka") else None,
                      "stream": StreamPlan(**{**d["stream"], "kills": tuple(d["stream"]["kills"])})
                      if d.get("stream") else None,
                      "stream_writer": ProducerPlan(**{**d["stream_writer"], "kill_after": tuple(d["stream_writer"]["kill_after"])})
                      if d.get("stream_writer") else None,
                      "compaction": CompactionPlan(**d["compaction"]) if d.get("compaction") else None,
                      "transactions": _txn_from_dict(d["transactions"]) if d.get("transactions") else None})

    @property
    def last_event(self) -> float:
        times = [p.start_at for p in self.producers] + [s.at for s in self.controller]
        for g in self.groups:
            for m in g.members:
                times += [t for t in (m.start_at, m.kill_at, m.freeze_at) if t is not None]
        if self.kafka:
            k = self.kafka
            times += [k.start_at, *(x.at for x in k.kills)]
            times += [t for m in k.members for t in (m.start_at, m.kill_at, m.freeze_at) if t is not None]
        if self.stream:
            times += [self.stream.start_at, *self.stream.kills]
        if self.stream_writer:
            times.append(self.stream_writer.start_at)
        if self.transactions:
            t = self.transactions
            times += [c.start_at for c in t.copiers] + list(t.ticks) + [a for a, _ in t.aborts]
            times += [x for c in t.copiers for x in (c.kill_at, c.freeze_at) if x is not None]
        return max(times, default=0.0)


def _kafka_from_dict(d: dict) -> KafkaPlan:
    return KafkaPlan(**{**d, "kills": tuple(ServerKill(**x) for x in d["kills"]),
                        "members": tuple(MemberPlan(**m) for m in d["members"])})


def _txn_from_dict(d: dict) -> TxnPlan:
    return TxnPlan(**{**d, "copiers": tuple(CopierPlan(**{**c, "outputs": tuple(c["outputs"])}) for c in d["copiers"]),
                      "ticks": tuple(d["ticks"]), "aborts": tuple(tuple(a) for a in d["aborts"]),
                      "reader": MemberPlan(**d["reader"]) if d.get("reader") else None})
