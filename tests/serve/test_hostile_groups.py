"""Classic and KIP-848 groups against clients that are broken or hostile, answered as Kafka 4's group
coordinator answers them: a member id given out and never used expires after its session timeout;
a session timeout outside the server's bounds is refused; OffsetFetch answers a topic the caller may
not describe with an error, not by leaving it out; DescribeGroups on a KIP-848 group; a classic
group whose members left is listed as empty by lakelog's CLI and by ListGroups."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import bootstrap
from tests.serve.raw import RawClient

pytestmark = pytest.mark.kafka_clients


def coordinated(server: Server, group: str = "g") -> RawClient:
    """A raw client of ``server``, which has taken ``group`` (FindCoordinator)."""
    client = RawClient(server.port)
    found = client.call(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
    assert (found.error_code, found.port) == (0, server.port)
    return client


def join(client: RawClient, member_id: str, session_ms: int = 10_000, rebalance_ms: int = 10_000, group: str = "g"):
    return client.call(11, 5, {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": rebalance_ms,
                               "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]})


def joined(client: RawClient, rebalance_ms: int = 10_000):
    """A member in group g: its id given out (KIP-394), then its join's answer."""
    asked = join(client, "", rebalance_ms=rebalance_ms)
    assert asked.error_code == ErrorCode.member_id_required and asked.member_id
    return join(client, asked.member_id, rebalance_ms=rebalance_ms)


def test_a_member_id_given_out_and_never_used_expires_after_its_session_timeout(serve_with):
    """A JoinGroup without a member id is answered MEMBER_ID_REQUIRED with an id the server keeps
    pending; a client that never joins with it must not hold the group's rebalances for their
    whole rebalance timeout (max.poll.interval.ms, 300 s by default): Kafka drops the pending id
    after the session timeout that JoinGroup asked for."""
    server = serve_with(group_min_session_timeout_ms=500)
    a, b, hostile = coordinated(server), RawClient(server.port), RawClient(server.port)
    first = joined(a, rebalance_ms=20_000)
    assert first.error_code == 0 and first.leader == first.member_id
    synced = a.call(14, 3, {"group_id": "g", "generation_id": first.generation_id, "member_id": first.member_id,
                            "group_instance_id": None, "assignments": [{"member_id": first.member_id, "assignment": b""}]})
    assert synced.error_code == 0

    left_pending = join(hostile, "", session_ms=1000)  # never followed up
    started = time.monotonic()
    assert left_pending.error_code == ErrorCode.member_id_required
    with ThreadPoolExecutor(2) as pool:
        second = pool.submit(joined, b, 20_000)
        while True:  # the stable member learns of the rebalance from its heartbeat, and joins again
            beat = a.call(12, 3, {"group_id": "g", "generation_id": first.generation_id,
                                  "member_id": first.member_id, "group_instance_id": None})
            if beat.error_code == ErrorCode.rebalance_in_progress:
                break
            assert beat.error_code == 0 and time.monotonic() - started < 10
            time.sleep(0.05)
        again = pool.submit(join, a, first.member_id, 10_000, 20_000)
        answers = [second.result(60), again.result(60)]
    took = time.monotonic() - started
    assert [x.error_code for x in answers] == [0, 0] and answers[0].generation_id == answers[1].generation_id
    assert len(next(x for x in answers if x.members).members) == 2  # the pending id is no member
    assert took < 5, f"the rebalance waited {took:.1f} s: the pending member id held it (its session: 1 s)"
    for c in (a, b, hostile):
        c.close()


def test_a_join_with_a_session_timeout_outside_the_servers_bounds_is_invalid_session_timeout(serve_with):
    """group.min.session.timeout.ms (6 s) and group.max.session.timeout.ms (30 min), Kafka's names
    and defaults: a JoinGroup asking for less or more is refused before it joins."""
    server = serve_with()
    client = coordinated(server)
    for session_ms in (5_999, 1_800_001):
        refused = join(client, "m-1", session_ms=session_ms)
        assert (refused.error_code, refused.member_id, refused.generation_id) == (
            ErrorCode.invalid_session_timeout, "m-1", -1), session_ms
        assert join(client, "", session_ms=session_ms).error_code == ErrorCode.invalid_session_timeout
    for session_ms in (6_000, 1_800_000):
        assert join(client, "", session_ms=session_ms).error_code == ErrorCode.member_id_required, session_ms
    client.close()

    lenient = serve_with(group_min_session_timeout_ms=1_000, group_max_session_timeout_ms=20_000)
    client = coordinated(lenient, "g2")  # g is the first server's
    assert join(client, "", session_ms=1_000, group="g2").error_code == ErrorCode.member_id_required
    assert join(client, "", session_ms=999, group="g2").error_code == ErrorCode.invalid_session_timeout
    assert join(client, "", session_ms=20_001, group="g2").error_code == ErrorCode.invalid_session_timeout
    client.close()


def test_session_timeout_bounds_that_cross_are_refused_with_both_values():
    with pytest.raises(ValueError, match=r"group_min_session_timeout_ms \(9000\).*group_max_session_timeout_ms \(8000\)"):
        ServeSettings(group_min_session_timeout_ms=9_000, group_max_session_timeout_ms=8_000)


def test_offset_fetch_answers_a_topic_the_caller_may_not_describe_with_topic_authorization_failed(serve_with, spark, root):
    """A committed offset of a topic the caller may not describe is not shown, and the partition is
    answered TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis): left out of the answer, a client takes
    it for a partition without a committed offset and resets it. Asking for all the group's
    topics leaves such a topic out, as Kafka does."""
    from control_plane.group.offsets import GroupOffsets

    acls = [{"principal": "User:ANONYMOUS", "resource": "topic", "name": "orders", "operations": ["read"]},
            {"principal": "User:ANONYMOUS", "resource": "group", "name": "g", "operations": ["read"]}]
    server = serve_with(acls=acls)
    for topic in ("orders", "secret"):
        server.ctx.admin.create(topic, 2)
        GroupOffsets(spark, root).commit("g", topic, {0: 5, 1: 7})
    client = coordinated(server)
    for version in (1, 5, 7):
        answer = client.call(9, version, {"group_id": "g", "require_stable": False, "topics": [
            {"name": "secret", "partition_indexes": [0, 1]}, {"name": "orders", "partition_indexes": [1]}]})
        got = {(t.name, p.partition_index): (p.error_code, p.committed_offset) for t in answer.topics for p in t.partitions}
        assert got == {("orders", 1): (0, 7), ("secret", 0): (ErrorCode.topic_authorization_failed, -1),
                       ("secret", 1): (ErrorCode.topic_authorization_failed, -1)}, version
        if version >= 2:
            assert answer.error_code == 0
    every = client.call(9, 7, {"group_id": "g", "require_stable": False, "topics": None})
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in every.topics] == [("orders", [5, 7])]
    client.close()


def test_describe_groups_on_a_kip_848_group_answers_as_kafka_4(served):
    """Kafka 4's DescribeGroups describes classic groups only: a KIP-848 group, with members or
    without, is answered GROUP_ID_NOT_FOUND "Group g is not a classic group." from version 6
    (KIP-1043), and as a Dead group without an error before it; a group that does not exist is
    GROUP_ID_NOT_FOUND "Group nobody not found." from version 6. ConsumerGroupDescribe describes
    the KIP-848 group either way."""
    served.ctx.admin.create("t", 1)
    client = coordinated(served)

    def beat(**values):
        return client.call(68, 1, {"group_id": "g", "member_id": "m1", "member_epoch": 0, "rebalance_timeout": 60000,
                                   "subscribed_topic_names": ["t"], "topic_partitions": [], **values})

    def described(version: int, group: str = "g"):
        group = client.call(15, version, {"groups": [group], "include_authorized_operations": False}).groups[0]
        return (group.error_code, getattr(group, "error_message", None), group.group_state, group.protocol_type,
                group.members)

    def check(state: str) -> None:
        for version in (0, 5):
            assert described(version) == (0, None, "Dead", "", ()), (state, version)
        assert described(6) == (ErrorCode.group_id_not_found, "Group g is not a classic group.", "Dead", "", ()), state
        group = client.call(69, 1, {"group_ids": ["g"], "include_authorized_operations": False}).groups[0]
        assert (group.error_code, group.group_state) == (0, state)

    assert beat().error_code == 0
    check("Stable")
    assert beat(member_epoch=-1, rebalance_timeout=-1, subscribed_topic_names=None, topic_partitions=None).error_code == 0
    check("Empty")
    assert client.call(10, 4, {"key_type": 0, "coordinator_keys": ["nobody"]}).coordinators[0].error_code == 0
    assert described(5, "nobody") == (0, None, "Dead", "", ())
    assert described(6, "nobody") == (ErrorCode.group_id_not_found, "Group nobody not found.", "Dead", "", ())
    client.close()


def test_a_classic_group_whose_members_left_is_listed_empty(served, root):
    """Two Kafka consumers join a classic group through the server and leave: `lakelog groups list`
    counts no member and says Empty, as `groups describe` and Kafka's ListGroups do."""
    from confluent_kafka import Consumer

    from jobs.cli import cli

    served.ctx.admin.create("t", 2)
    consumers = [Consumer({"bootstrap.servers": bootstrap(served), "group.id": "g", "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"}) for _ in range(2)]
    for c in consumers:
        c.subscribe(["t"])
    deadline = time.monotonic() + 60
    while sorted(len(c.assignment()) for c in consumers) != [1, 1]:
        assert time.monotonic() < deadline, "the two consumers did not share the topic"
        for c in consumers:
            c.poll(0.1)
    for c in consumers:
        c.close()  # LeaveGroup

    def cli_json(*args):
        out = CliRunner().invoke(cli, ["--root", root, *args, "--json"], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        return json.loads(out.stdout)

    deadline = time.monotonic() + 15
    while True:
        listed = {g["group"]: g for g in cli_json("groups", "list")}
        if listed["g"]["members"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (listed["g"]["members"], listed["g"].get("state")) == (0, "Empty"), listed
    described = cli_json("groups", "describe", "--group", "g")
    assert described["state"] == "Empty" and not any(m["live"] for m in described["members"])
    client = RawClient(served.port)
    groups = client.call(16, 4, {"states_filter": []}).groups
    assert [(x.group_id, x.group_state) for x in groups] == [("g", "Empty")]
    client.close()
