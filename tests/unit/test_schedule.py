"""Campaign schedules are pure: a seed always draws the same plan, and a kept schedule round-trips."""

import json
from collections import Counter
from dataclasses import replace

from chaos.schedule import MAX_PARTITIONS, STREAM_WRITER, Schedule, draw, input_records, shorten


def test_a_seed_always_draws_the_same_schedule():
    assert draw(17).to_dict() == draw(17).to_dict()
    assert draw(17).to_dict() != draw(18).to_dict()
    plan = draw(17).producers[0]
    assert input_records(draw(17), plan) == input_records(draw(17), plan)


def test_a_kept_schedule_round_trips_through_json():
    for seed in range(1, 30):
        s = draw(seed)
        again = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
        assert again == s


def test_schedules_stay_within_bounds_and_short_ones_are_trimmed():
    kinds = set()
    for seed in range(1, 200):
        s = draw(seed)
        assert 2 <= len(s.producers) <= 5 and len(s.groups) == 2
        assert all(1 <= (c.partitions or 1) <= MAX_PARTITIONS for c in s.controller)
        kinds |= {c.kind for c in s.controller} | {c.crash_at for c in s.controller if c.crash_at}
        short = shorten(s)
        assert len(short.producers) <= 2 and all(p.records <= 60 for p in short.producers)
        assert len(short.controller) <= 3 and all(len(g.members) == 1 for g in short.groups)
    # over 200 seeds every kind of controller step and every controller crash point is drawn
    assert {"alter", "tick", "alter:before_record", "alter:after_apply", "retire:after_purge"} <= kinds


def test_most_schedules_are_replicated_and_race_their_copy_rounds():
    """Over a campaign's hundred seeds, at least half the schedules are replicated, and each of
    those holds at least one race; together they hold every race: a copier held between its reads
    and its commit (alone, and with a second copier started meanwhile), two copiers started at
    once, and an election started while a round is held."""
    replicated = [s for s in (draw(seed) for seed in range(700, 800)) if s.replicas]
    assert len(replicated) >= 50

    def races(s):
        return [c for c in s.controller if c.kind in ("replicate", "elect")
                and (c.pause_for or c.racers > 1 or c.during_round)]

    assert all(races(s) for s in replicated), [s.seed for s in replicated if not races(s)]
    steps = [c for s in replicated for c in races(s)]
    held = [c for c in steps if c.kind == "replicate" and c.pause_for > 0]
    assert len([c for c in held if c.racers == 1]) >= 10, "a copier held while the producers commit"
    assert len([c for c in held if c.racers == 2]) >= 10, "a copier held while a second copier commits"
    assert len([c for c in steps if c.kind == "replicate" and c.racers == 2 and not c.pause_for]) >= 10
    assert len([c for c in steps if c.kind == "elect" and c.during_round and c.pause_for > 0]) >= 10
    assert all(not c.crash_at for c in steps), "a race dies nowhere: what it attacks is the race"
    assert not any(races(s) for s in (draw(seed) for seed in range(700, 800)) if not s.replicas)


def test_draining_stops_a_group_that_stands_still_and_lets_a_slow_one_go_on():
    from chaos.drain import DRAIN_LIMIT_S, DRAIN_STALL_S, drain_stuck

    assert drain_stuck(0.0, 0.0, DRAIN_STALL_S - 1) is None, "not stuck yet"
    assert "no progress" in drain_stuck(0.0, 0.0, DRAIN_STALL_S)
    assert drain_stuck(0.0, 400.0, 450.0) is None, "moving at 450 s: a flat 300 s limit would have failed it"
    assert "still behind" in drain_stuck(0.0, DRAIN_LIMIT_S - 1, DRAIN_LIMIT_S)


def test_a_resize_step_is_taken_from_the_count_the_topic_has_when_it_runs():
    from chaos.controller_steps import adapt_step
    from chaos.schedule import ControllerStep

    grow = ControllerStep(at=1.0, kind="alter", partitions=4, change="grow", by=2)
    shrink = ControllerStep(at=1.0, kind="alter", partitions=2, change="shrink", by=1)
    assert adapt_step(grow, 3, [])[0].partitions == 5, "from the real count, not the plan's guess of it"
    assert adapt_step(shrink, 4, [])[0].partitions == 3
    assert adapt_step(shrink, 1, [])[0].partitions == 2, "a topic of one partition grows instead"
    assert adapt_step(grow, MAX_PARTITIONS, [])[0].partitions == MAX_PARTITIONS - 2
    assert adapt_step(grow, 2, [3, 4])[0].partitions == 3, "stops below a marked number"
    assert adapt_step(grow, 2, [2, 3]) == (grow, True), "the next number is marked: retire first"
    assert adapt_step(grow, 2, [])[0].change is None, "a re-run after a crash keeps the target"


def test_schedules_draw_names_with_dots_shared_sinks_and_decoys_whose_dotted_ids_would_collide():
    shared = decoys = colliding = prefixed = 0
    for seed in range(1, 200):
        s = draw(seed)
        shared += len({g.sink_name for g in s.groups}) == 1
        if s.decoy:
            decoys += 1
            target = next(g for g in s.groups if g.sink_name == s.decoy.sink)
            colliding += f"{target.name}.{s.topic}" == f"{s.decoy.group}.{s.decoy.topic}"
            prefixed += s.topic.startswith(s.decoy.topic + ".")
        again = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
        assert again == s
    assert shared > 60 and decoys > 40 and colliding > 20 and prefixed > 10, (shared, decoys, colliding, prefixed)


def test_kafka_clients_are_drawn_from_a_generator_of_their_own(monkeypatch):
    """A seed's Kafka part (chaos.schedule._kafka) changes nothing else of its schedule: without
    it, every seed draws what it drew before Kafka's clients were added (the streams, drawn after
    it over the whole schedule's time, aside)."""
    import chaos.schedule as schedule

    monkeypatch.setattr(schedule, "_stream", lambda s, rng: s)
    monkeypatch.setattr(schedule, "_compacted", lambda s, rng: s)
    monkeypatch.setattr(schedule, "_transactions", lambda s, rng: s)  # their notes follow Kafka's
    drawn = {seed: draw(seed) for seed in range(1, 200)}
    monkeypatch.setattr(schedule, "_kafka", lambda s, rng: s)
    for seed, s in drawn.items():
        before = draw(seed)
        assert s.kafka is None or s.notes[:len(before.notes)] == before.notes
        assert replace(s, kafka=None, notes=before.notes) == before, seed


def test_kafka_schedules_mix_servers_clients_assignors_and_faults():
    from chaos.schedule import KAFKA_ASSIGNORS

    kafka = [s for s in (draw(seed) for seed in range(1, 300)) if s.kafka]
    assert len(kafka) >= 45 and not any(s.replicas for s in kafka), "a topic at one root only"
    plans = [s.kafka for s in kafka]
    assert {p.servers for p in plans} == {1, 2}
    assert {(p.client, p.assignor) for p in plans} == {(c, a) for c, assignors in KAFKA_ASSIGNORS.items() for a in assignors}
    assert all(1 <= len(p.kills) <= 3 and all(k.server < p.servers and 1 <= k.down_for <= 5 for k in p.kills)
               for p in plans)
    assert sum(1 for p in plans for k in p.kills if k.server == 1) >= 20, "the producer's own server killed too"
    members = [m for p in plans for m in p.members]
    assert sum(m.kill_at is not None for m in members) >= 10 and sum(m.freeze_at is not None for m in members) >= 10
    for s in kafka:
        assert s.last_event >= max(k.at for k in s.kafka.kills)
        again = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
        assert again == s
        short = shorten(s).kafka
        assert short.records <= 60 and len(short.members) == 1 and len(short.kills) <= 2


def test_every_full_schedule_has_a_stream_reader_on_either_kind_of_session():
    """Over a campaign's hundred seeds, about half the streams run on a classic session and half on
    Spark Connect, each killed at least once; a third or so of the schedules also write through a
    stream; short schedules have neither."""
    schedules = [draw(seed) for seed in range(1, 101)]
    assert all(s.stream is not None and 1 <= len(s.stream.kills) <= 3 for s in schedules)
    sessions = Counter(s.stream.session for s in schedules)
    assert set(sessions) == {"classic", "connect"} and min(sessions.values()) >= 35, sessions
    assert 20 <= sum(s.stream_writer is not None for s in schedules) <= 50
    assert all(shorten(s).stream is None and shorten(s).stream_writer is None for s in schedules)


def test_the_streams_are_drawn_from_a_generator_of_their_own(monkeypatch):
    """Drawing the streams leaves the rest of a seed's schedule as it was."""
    import chaos.schedule as schedule

    monkeypatch.setattr(schedule, "_compacted", lambda s, rng: s)
    monkeypatch.setattr(schedule, "_transactions", lambda s, rng: s)  # their notes follow the streams'
    drawn = {seed: draw(seed) for seed in range(1, 100)}
    monkeypatch.setattr(schedule, "_stream", lambda s, rng: s)
    for seed, s in drawn.items():
        before = draw(seed)
        assert s.notes[:len(before.notes)] == before.notes
        assert replace(s, stream=None, stream_writer=None, notes=before.notes) == before, seed


def test_compacted_topics_are_drawn_from_a_generator_of_their_own(monkeypatch):
    """A quarter of the schedules have a compacted topic (none replicated), with key compactions
    among the controller's steps, some killed at a key compaction's crash point; the rest of a
    seed's schedule is what it was but for fewer keys."""
    import chaos.schedule as schedule

    drawn = {seed: draw(seed) for seed in range(1, 400)}
    monkeypatch.setattr(schedule, "_compacted", lambda s, rng: s)
    compacted = [s for s in drawn.values() if s.compaction]
    assert 60 < len(compacted) < 140 and not any(s.replicas for s in compacted)
    crashes = {c.crash_at for s in compacted for c in s.controller if c.kind == "compact_keys"}
    assert crashes == {None, "compaction:before_commit", "compaction:after_commit"}
    for seed, s in drawn.items():
        before = draw(seed)
        steps = tuple(c for c in s.controller if c.kind != "compact_keys")
        assert replace(s, compaction=None, keys=before.keys, controller=steps, notes=before.notes) == before, seed
        assert Schedule.from_dict(s.to_dict()) == s


def test_only_lakelogs_producers_send_tombstones_on_a_compacted_topic():
    """Records of the Kafka producer and the stream writer are named by their values: no tombstones."""
    s = next(draw(seed) for seed in range(1, 400) if draw(seed).compaction and draw(seed).kafka)
    p0 = input_records(s, s.producers[0])
    assert any(r["value"] is None for r in p0) and any(r["value"] is not None for r in p0)
    for pid in ("kp", STREAM_WRITER, "decoy"):
        plan = replace(s.producers[0], producer_id=pid)
        assert all(r["value"] == f"{pid}:{i}" for i, r in enumerate(input_records(s, plan)))
    plain = next(draw(seed) for seed in range(1, 400) if not draw(seed).compaction)
    assert all(r["value"] is not None for p in plain.producers for r in input_records(plain, p))
