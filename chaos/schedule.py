"""A campaign schedule, drawn from a seed: who produces, resizes, consumes and fails, and when.

Pure: ``draw(seed)`` always returns the same schedule, so a failing seed can be re-run and kept
as a regression test. Times are seconds from the schedule's start. Execution is truly concurrent
(``chaos.runner``), so two runs of one seed interleave differently; what a seed fixes is the
plan of operations and faults.
"""

from __future__ import annotations

import random
from dataclasses import replace

from chaos.plans import (  # noqa: F401 (the plans, also named from here)
    CompactionPlan, ControllerStep, CopierPlan, DecoyPlan, GroupPlan, KafkaPlan, MemberPlan, ProducerPlan, Schedule,
    ServerKill, StreamPlan, TxnPlan, _kafka_from_dict,
)

PRODUCER_CRASHES = ("produce:after_write", "produce:after_commit")
CONTROLLER_CRASHES = {
    "alter": ("alter:before_record", "alter:after_record", "alter:before_apply_commit", "alter:after_apply"),
    "tick": ("retire:before_record", "retire:after_record", "retire:after_apply", "retire:after_purge"),
    "delete_records": ("retention:before_commit", "retention:after_commit"),
    "retention": ("retention:before_commit", "retention:after_commit"),
    "compact": ("compact:before_commit",),
    "compact_keys": ("compaction:before_commit", "compaction:after_commit"),
    "replicate": ("replicate:after_write",),
    "elect": ("elect:after_fence", "elect:after_record"),
}
# A replicated schedule's steps (the topic at its root and the follower roots ``Schedule.replicas``).
REPLICA_STEPS = ("replicate", "elect", "lag")
# Steps that keep the log bounded: how many of each a schedule draws at most.
UPKEEP = ("delete_records", "compact", "retention")
MEMBER_CRASHES = ("group:after_revoke", "group:after_propose", "group:after_acquire",
                  "consume:after_sink_commit", "consume:after_offset_commit")
TIMEZONES = ("UTC", "Asia/Tokyo", "America/Los_Angeles")
MAX_PARTITIONS = 8


def _controller_steps(rng: random.Random, partitions: int) -> list[ControllerStep]:
    """Resizes and ticks at random moments, tracking the expected count so targets make sense;
    after a shrink, often a retirement and a grow back over the retired numbers."""
    steps: list[ControllerStep] = []
    count, marked = partitions, set()
    t = rng.uniform(3, 6)
    planned: list[tuple[str, dict]] = []
    for _ in range(rng.randint(2, 5)):
        planned.append((rng.choices(["grow", "shrink", "tick", "tick_delay"], [3, 3, 2, 1])[0], {}))
    queue = list(planned)
    while queue:
        kind, _ = queue.pop(0)
        racers = 1
        crash = None
        if kind == "grow":
            before = count
            target = min(MAX_PARTITIONS, count + rng.randint(1, 3))
            if target == count:
                kind = "shrink"
            else:
                if not any(q in marked for q in range(count, target)):
                    count = target
                racers = 2 if rng.random() < 0.25 else 1
                crash = rng.choice(CONTROLLER_CRASHES["alter"]) if rng.random() < 0.3 else None
                steps.append(ControllerStep(at=round(t, 1), kind="alter", partitions=target, change="grow",
                                            by=target - before, racers=racers, crash_at=crash))
        if kind == "shrink":
            if count <= 1:
                continue
            target = rng.randint(max(1, count - 2), count - 1)
            marked |= set(range(target, count))
            by, count = count - target, target
            crash = rng.choice(CONTROLLER_CRASHES["alter"]) if rng.random() < 0.3 else None
            steps.append(ControllerStep(at=round(t, 1), kind="alter", partitions=target, change="shrink",
                                        by=by, crash_at=crash))
            if rng.random() < 0.5:  # retire at once, then grow back over the retired numbers
                queue[:0] = [("tick", {}), ("grow", {})]
        elif kind in ("tick", "tick_delay"):
            delay = 0.0 if kind == "tick" else round(rng.uniform(1, 6), 1)
            if delay == 0.0:
                marked.clear()
            crash = rng.choice(CONTROLLER_CRASHES["tick"]) if rng.random() < 0.3 else None
            steps.append(ControllerStep(at=round(t, 1), kind="tick", delay=delay, crash_at=crash))
        t += rng.uniform(3, 7)
    for kind in UPKEEP:  # drawn after the resizes, so seeds keep their resizes
        if rng.random() < 0.5:
            crash = rng.choice(CONTROLLER_CRASHES[kind]) if rng.random() < 0.3 else None
            steps.append(ControllerStep(at=round(rng.uniform(4, t), 1), kind=kind, pick=rng.randint(0, 7),
                                        fraction=round(rng.uniform(0.1, 0.5), 2), bytes=rng.randint(20_000, 60_000),
                                        crash_at=crash))
    return sorted(steps, key=lambda s: s.at)


def _members(rng: random.Random, start: float, lag: float, session_s: float) -> tuple[MemberPlan, ...]:
    out = []
    for _ in range(rng.randint(1, 2)):
        kill = freeze = None
        fault = rng.random()
        if fault < 0.25:
            kill = round(start + rng.uniform(4, 25), 1)
        elif fault < 0.45:
            freeze = round(start + rng.uniform(4, 25), 1)
        crash = rng.choice(MEMBER_CRASHES) if rng.random() < 0.25 else None
        out.append(MemberPlan(start_at=round(start + rng.uniform(0, 3), 1), kill_at=kill,
                              restart_after=round(rng.uniform(1, 4), 1), freeze_at=freeze,
                              freeze_for=round(session_s * rng.uniform(1.3, 2.0), 1), lag_s=lag, crash_at=crash))
    return tuple(out)


def draw(seed: int, short: bool = False) -> Schedule:
    """The schedule of ``seed``; ``short`` trims it (two producers of at most 60 records, three
    controller steps, one member per group, faults kept) for the default test suite."""
    rng = random.Random(seed)
    partitions = rng.randint(2, 4)
    producers = []
    for i in range(rng.randint(2, 4)):
        producers.append(ProducerPlan(
            producer_id=f"p{i}", records=rng.randint(40, 160), batch=rng.randint(20, 60),
            start_at=round(rng.uniform(0, 10), 1),
            kill_after=(round(rng.uniform(2, 10), 1),) if rng.random() < 0.5 else (),
            crash_at=f"{rng.choice(PRODUCER_CRASHES)}@{rng.randint(1, 3)}" if rng.random() < 0.3 else None,
            own_jvm=i == 0 and rng.random() < 0.5,
        ))
    if rng.random() < 0.3:
        producers.append(ProducerPlan(producer_id="bad", records=40, batch=20, start_at=round(rng.uniform(0, 15), 1),
                                      bad_input=True))
    session_ms = 9_000
    late = rng.choice(["eager", "coop"])
    lagging = rng.choice(["eager", "coop"])
    groups = []
    for name, protocol, assignor in (("eager", "eager", rng.choice(["range", "roundrobin", "sticky"])),
                                     ("coop", "cooperative", "cooperative-sticky")):
        start = rng.uniform(12, 25) if name == late else rng.uniform(0, 4)
        lag = round(rng.uniform(0.3, 1.2), 1) if name == lagging else 0.0
        groups.append(GroupPlan(name=name, protocol=protocol, assignor=assignor, batch=rng.randint(30, 60) if lag else rng.randint(100, 250),
                                members=_members(rng, start, lag, session_ms / 1000)))
    schedule = Schedule(
        seed=seed, partitions=partitions, keys=rng.randint(8, 30), producers=tuple(producers),
        controller=tuple(_controller_steps(rng, partitions)), groups=tuple(groups), session_ms=session_ms,
        create_crash=rng.random() < 0.15,
        notes=[f"late group: {late}", f"lagging group: {lagging}"],
    )
    schedule = _named(schedule, random.Random(f"{seed}/names"))
    schedule = _replicated(schedule, random.Random(f"{seed}/replicas"))
    schedule = _kafka(schedule, random.Random(f"{seed}/kafka"))
    schedule = _stream(schedule, random.Random(f"{seed}/stream"))
    schedule = _compacted(schedule, random.Random(f"{seed}/compacted"))
    schedule = _transactions(schedule, random.Random(f"{seed}/txn"))
    return shorten(schedule) if short else schedule


COMPACTED_SHARE = 0.6  # of the schedules whose topic is not replicated: one in four of all


def _compacted(s: Schedule, rng: random.Random) -> Schedule:
    """Three in five of the schedules whose topic has one root (one in four of all; a replicated
    topic's followers hold copies of its log, which cleaning does not follow) have a compacted
    topic (``CompactionPlan``): fewer keys (4-10), so keys
    repeat often, one lakelog producer's record in eight or so a tombstone, and two to four key
    compactions racing the producers, groups and resizes, some by two controllers at once, some
    killed at a key compaction's crash point (ticks clean the topic too). Drawn from a generator
    of its own, so every other draw of a seed is what it was."""
    if s.replicas or rng.random() >= COMPACTED_SHARE:
        return s
    plan = CompactionPlan(policy=rng.choice(("compact", "compact,delete")),
                          delete_retention_ms=rng.choice((0, 500, 3000)),
                          dirty_ratio=rng.choice((0.01, 0.1, 0.3)), tombstones=round(rng.uniform(0.05, 0.2), 2))
    end = s.last_event + 15
    steps = []
    for _ in range(rng.randint(2, 4)):
        crash = rng.choice(CONTROLLER_CRASHES["compact_keys"]) if rng.random() < 0.35 else None
        steps.append(ControllerStep(at=round(rng.uniform(8, end), 1), kind="compact_keys", crash_at=crash,
                                    racers=2 if crash is None and rng.random() < 0.25 else 1))
    return replace(s, compaction=plan, keys=rng.randint(4, 10),
                   controller=tuple(sorted(s.controller + tuple(steps), key=lambda c: c.at)),
                   notes=s.notes + [f"compacted topic ({plan.policy}, delete.retention.ms={plan.delete_retention_ms})"])


TXN_SHARE = 1 / 3  # of the schedules whose topic is not replicated: about one in seven of all
TXN_HORIZON = 40.0  # the races fall within this many seconds of the start
TXN_CRASHES = ("txn:after_add_partitions", "txn:after_append", "txn:after_decision", "txn:after_topic_markers",
               "txn:after_positions")


def _transactions(s: Schedule, rng: random.Random) -> Schedule:
    """One in three of the schedules whose topic has one root (a replicated topic's elections and
    lost roots are a dimension of their own; kept apart, a finding here is about transactions) add
    read-process-write copiers (``TxnPlan``): one or two, each reading the topic read_committed
    into two copy topics of its own in transactions of 5-40 records, some SIGKILLed mid-way (a
    hanging transaction the successor aborts), killed at a transaction's crash point, frozen while a
    successor under the same id starts (a zombie, to be fenced), or aborting every few transactions
    on purpose; one to three coordinator ticks and sometimes `transactions abort` racing them; and
    a read_committed group reading a copy topic into a sink. Drawn from a generator of its own, so
    every other draw of a seed is what it was."""
    if s.replicas or rng.random() >= TXN_SHARE:
        return s
    end = TXN_HORIZON  # not the schedule's last event: the other parts' draws move it
    copiers = []
    for i in range(rng.randint(1, 2)):
        start = round(rng.uniform(1, 8), 1)
        fault = rng.random()
        copiers.append(CopierPlan(
            transactional_id=f"copier{i}", group=f"copier{i}", outputs=(f"{s.topic}-copy{i}", f"{s.topic}-copy{i}-b"),
            batch=rng.randint(5, 40), start_at=start,
            kill_at=round(start + rng.uniform(4, 25), 1) if fault < 0.35 else None,
            freeze_at=round(start + rng.uniform(4, 25), 1) if 0.35 <= fault < 0.65 else None,
            freeze_for=round(rng.uniform(4, 10), 1), restart_after=round(rng.uniform(0.5, 3), 1),
            crash_at=f"{rng.choice(TXN_CRASHES)}@{rng.randint(1, 3)}" if rng.random() < 0.5 else None,
            abort_every=rng.choice((0, 0, 3, 5))))
    ticks = tuple(sorted(round(rng.uniform(4, end), 1) for _ in range(rng.randint(1, 3))))
    aborts = tuple(sorted((round(rng.uniform(6, end), 1), rng.randrange(len(copiers)))
                          for _ in range(rng.randint(1, 2)))) if rng.random() < 0.5 else ()
    reader_start = round(rng.uniform(2, 10), 1)
    reader = MemberPlan(start_at=reader_start, kill_at=round(reader_start + rng.uniform(4, 20), 1)
                        if rng.random() < 0.3 else None, restart_after=round(rng.uniform(1, 3), 1))
    plan = TxnPlan(copiers=tuple(copiers), partitions=rng.randint(1, 3), ticks=ticks, aborts=aborts, reader=reader)
    return replace(s, transactions=plan, notes=s.notes + [f"{len(copiers)} transactional copier(s)"])


STREAM_SESSIONS = ("classic", "connect")
STREAM_WRITER = "sw"  # the stream writer's producerId (its records are judged as their values name them)
STREAM_WRITER_SHARE = 1 / 3


def _stream(s: Schedule, rng: random.Random) -> Schedule:
    """Every schedule has a stream reader (``StreamPlan``), on a classic or a Spark Connect session
    as the seed draws: started 0-3 s into the schedule, killed one to three times while the
    schedule's work goes on, micro-batches of 20-120 records. One schedule in three also has a stream
    writer (``stream_writer``: ``df.writeStream.format("lakelog")`` of 60-200 records, in a JVM of
    its own, killed mid-way in half of them and started again from its checkpoint). Drawn from a generator of its own, so
    every other draw of a seed is what it was."""
    end = s.last_event + 5
    session = rng.choice(STREAM_SESSIONS)
    kills = rng.randint(1, 3)
    plan = StreamPlan(session=session, start_at=round(rng.uniform(0, 3), 1),
                      kills=tuple(sorted(round(rng.uniform(5, end), 1) for _ in range(kills))),
                      restart_after=round(rng.uniform(1, 4), 1), pause_s=round(rng.uniform(0.5, 3), 1),
                      max_offsets=rng.randint(20, 120))
    s = replace(s, stream=plan, notes=s.notes + [f"stream on a {session} session"])
    if rng.random() >= STREAM_WRITER_SHARE:
        return s
    writer = ProducerPlan(producer_id=STREAM_WRITER, records=rng.randint(60, 200), batch=rng.randint(20, 60),
                          start_at=round(rng.uniform(0, 10), 1), own_jvm=True,
                          kill_after=(round(rng.uniform(10, 30), 1),) if rng.random() < 0.5 else ())
    return replace(s, stream_writer=writer, notes=s.notes + ["a stream writes to the topic"])


KAFKA_SHARE = 0.6  # of the schedules whose topic is not replicated
KAFKA_ASSIGNORS = {"kafka-python": ("range", "roundrobin", "sticky", "cooperative-sticky"),
                   "librdkafka": ("range", "roundrobin", "cooperative-sticky")}


def _kafka(s: Schedule, rng: random.Random) -> Schedule:
    """Three in five of the schedules whose topic has one root add Kafka's clients through one or two `lakelog
    serve` processes (``KafkaPlan``): a producer sending over 15-40 s, a group of one or two members
    (a quarter killed and restarted, a fifth frozen past their session; the group joins 12-25 s
    late in three schedules in ten, and lags in two in five), and one to three kills of a server,
    each started again 1-5 s later. Drawn from a generator of their own, so every other
    draw of a seed is what it was."""
    if s.replicas or rng.random() >= KAFKA_SHARE:
        return s
    servers = rng.choice((1, 2))
    start = round(rng.uniform(0, 8), 1)
    produce_for = round(rng.uniform(15, 40), 1)
    end = max(s.last_event, start + produce_for)
    kills = tuple(sorted((ServerKill(at=round(rng.uniform(3, end), 1), server=rng.randrange(servers),
                                     down_for=round(rng.uniform(1, 5), 1)) for _ in range(rng.randint(1, 3))),
                         key=lambda k: k.at))
    client = rng.choice(tuple(KAFKA_ASSIGNORS))
    session_ms = 10_000
    # a group joining 12-25 s late, or lagging (small polls, a sleep after each), has a backlog of
    # records from before and after the resizes: what the gates hold back
    late, lagging = rng.random() < 0.3, rng.random() < 0.4
    lag = round(rng.uniform(0.3, 1.2), 1) if lagging else 0.0
    first = rng.uniform(12, 25) if late else rng.uniform(0, 4)
    members = []
    for _ in range(rng.randint(1, 2)):
        fault = rng.random()
        members.append(MemberPlan(
            start_at=round(first + rng.uniform(0, 3), 1),
            kill_at=round(rng.uniform(first + 6, end + 6), 1) if fault < 0.25 else None,
            freeze_at=round(rng.uniform(first + 6, end + 6), 1) if 0.25 <= fault < 0.45 else None,
            freeze_for=round(session_ms / 1000 * rng.uniform(1.3, 2.0), 1), restart_after=round(rng.uniform(1, 4), 1),
            lag_s=lag))
    prefix = s.groups[0].name[:-len("eager")] if s.groups and s.groups[0].name.endswith("eager") else ""
    plan = KafkaPlan(servers=servers, kills=kills, linger_ms=rng.choice((5, 20, 50)), records=rng.randint(80, 240),
                     start_at=start, produce_for=produce_for, client=client,
                     assignor=rng.choice(KAFKA_ASSIGNORS[client]), batch=rng.randint(20, 40) if lagging else rng.randint(50, 150),
                     members=tuple(members), group=f"{prefix}kafka", session_ms=session_ms)
    notes = [f"Kafka clients through {servers} server(s), group on {client}"] + (["Kafka group late"] if late else []) + (
        ["Kafka group lagging"] if lagging else [])
    return replace(s, kafka=plan, notes=s.notes + notes)


def _replicated(s: Schedule, rng: random.Random) -> Schedule:
    """Three schedules in five keep the topic at one or two more roots: copies every few seconds
    (some killed mid-copy), one or two elections (some with the leader's root lost first and
    returning later, some killed mid-way), a follower cut off for a while (it leaves the in-sync set
    and rejoins), and the races of ``_replica_races``. Drawn from a generator of their own, so the
    rest of a seed's schedule is as before (and a schedule replicated when half were is unchanged
    but for its races)."""
    if rng.random() < 0.4:
        return s
    end = s.last_event + 5
    steps = []
    t = rng.uniform(1, 3)
    while t < end:
        crash = rng.choice(CONTROLLER_CRASHES["replicate"]) if rng.random() < 0.15 else None
        steps.append(ControllerStep(at=round(t, 1), kind="replicate", crash_at=crash))
        t += rng.uniform(2, 4)
    for _ in range(rng.randint(1, 2)):
        crash = rng.choice(CONTROLLER_CRASHES["elect"]) if rng.random() < 0.3 else None
        cut = round(rng.uniform(3, 8), 1) if rng.random() < 0.5 else 0.0
        steps.append(ControllerStep(at=round(rng.uniform(5, end), 1), kind="elect", cut_for=cut, crash_at=crash))
    if rng.random() < 0.5:
        steps.append(ControllerStep(at=round(rng.uniform(3, end), 1), kind="lag", cut_for=round(rng.uniform(3, 8), 1),
                                    pick=rng.randint(0, 7)))
    replicas = ("us",) if rng.random() < 0.6 else ("us", "ap")
    steps += _replica_races(random.Random(f"{s.seed}/replica-races"), end)
    return replace(s, replicas=replicas, controller=tuple(sorted(s.controller + tuple(steps), key=lambda c: c.at)),
                   notes=s.notes + [f"replicated at {1 + len(replicas)} roots"])


def _replica_races(rng: random.Random, end: float) -> list[ControllerStep]:
    """The races a replicated schedule adds to its copy rounds, at least one of them: a copier
    waiting between its reads and its commit for a few seconds while the producers (and, half the
    time, a second copier) commit; two copiers started at once; an election started while a round
    waits between its reads and its commit. Copies stamped with an epoch an election ended, and
    commits made on reads another copier moved, are what they attack."""
    races = []
    if rng.random() < 0.7:
        races.append(ControllerStep(at=round(rng.uniform(2, min(15.0, end)), 1), kind="replicate",
                                    pause_for=round(rng.uniform(2, 6), 1), racers=2 if rng.random() < 0.5 else 1))
    if rng.random() < 0.5:
        races.append(ControllerStep(at=round(rng.uniform(2, end), 1), kind="replicate", racers=2))
    if rng.random() < 0.6 or not races:
        races.append(ControllerStep(at=round(rng.uniform(5, end), 1), kind="elect", during_round=True,
                                    pause_for=round(rng.uniform(2, 6), 1)))
    return races


TOPIC_NAMES = ("orders.v1", "billing.events", "pay.eu.v2", "chaos")


def _named(s: Schedule, rng: random.Random) -> Schedule:
    """Names as users give them: dotted topics and groups, the two groups sharing one sink in half
    the schedules, and in two of three with a dotted topic a decoy writing into a main group's sink:
    a topic named as the main topic's tail and a group named as that group plus the main topic's
    head (ids joined with dots would be the same), or a topic named as the main topic's head. Drawn from a generator of their own, so the rest of a
    seed's schedule is what it was before names were drawn."""
    topic = rng.choice(TOPIC_NAMES)
    prefix = rng.choice(["", "svc.", "team.a."])
    shared = rng.random() < 0.5
    groups = tuple(replace(g, name=prefix + g.name, sink="shared" if shared else None) for g in s.groups)
    notes = [n.replace(": eager", f": {prefix}eager").replace(": coop", f": {prefix}coop") for n in s.notes]
    decoy = None
    if "." in topic and rng.random() < 2 / 3:
        head, tail = topic.split(".", 1)
        target = rng.choice(groups)
        # the main topic's tail, by a group whose name joins with it alike; or its head (a topic
        # sharing the main one's prefix), by a group named after the rest
        name, group = (tail, f"{target.name}.{head}") if rng.random() < 0.6 else (head, f"{target.name}.{tail}")
        decoy = DecoyPlan(topic=name, group=group, sink=target.sink_name,
                          partitions=rng.randint(1, 2), records=rng.randint(30, 60))
    if shared:
        notes.append("both groups write one sink")
    return replace(s, topic=topic, groups=groups, decoy=decoy, notes=notes)


def shorten(s: Schedule) -> Schedule:
    producers = tuple(replace(p, records=min(p.records, 60), start_at=min(p.start_at, 4.0)) for p in s.producers[:2])
    groups = tuple(replace(g, members=tuple(replace(m, start_at=min(m.start_at, 8.0)) for m in g.members[:1]))
                   for g in s.groups)
    kafka = s.kafka and replace(s.kafka, records=min(s.kafka.records, 60), members=s.kafka.members[:1],
                                start_at=min(s.kafka.start_at, 4.0), produce_for=min(s.kafka.produce_for, 15.0),
                                kills=tuple(replace(k, at=min(k.at, 18.0)) for k in s.kafka.kills[:2]))
    # no streams: their JVMs or Connect server would double a short schedule's time
    txn = s.transactions and replace(s.transactions, copiers=s.transactions.copiers[:1],
                                     aborts=tuple(a for a in s.transactions.aborts if a[1] == 0))
    return replace(s, producers=producers, controller=s.controller[:3], groups=groups, kafka=kafka, stream=None,
                   stream_writer=None, transactions=txn, notes=s.notes + ["short"])


def input_records(schedule: Schedule, plan: ProducerPlan) -> list[dict]:
    """The records of a producer's input file (deterministic per seed and producer)."""
    rng = random.Random(f"{schedule.seed}/{plan.producer_id}")
    records = [{"key": f"k{rng.randrange(schedule.keys)}", "value": f"{plan.producer_id}:{i}"} for i in range(plan.records)]
    if schedule.compaction and sends_tombstones(plan.producer_id):
        nulls = random.Random(f"{schedule.seed}/{plan.producer_id}/tombstones")
        for r in records:
            if nulls.random() < schedule.compaction.tombstones:
                r["value"] = None
    return records


def sends_tombstones(producer_id: str) -> bool:
    """lakelog's own producers (p0, p1, ...): the log names their records by producer id and
    sequence. Others' records are named by their values (``kp:17``), which a tombstone lacks."""
    return producer_id[:1] == "p" and producer_id[1:].isdigit()


def timezone_for(schedule: Schedule, actor: str) -> str:
    """Each actor process runs under a time zone of its own (UTC, UTC+9, UTC-8)."""
    return random.Random(f"{schedule.seed}/tz/{actor}").choice(TIMEZONES)
