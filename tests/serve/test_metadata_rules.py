"""Metadata as Kafka's broker answers it: auto-creation only for a caller that may create the
topic (TOPIC_AUTHORIZATION_FAILED otherwise, and nothing made), an illegal topic name
INVALID_TOPIC_EXCEPTION, and each name once however often it is asked for."""

from __future__ import annotations

import pytest

from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import stopped_with_no_task_left
from tests.serve.raw import RawClient

pytestmark = pytest.mark.kafka_clients
USERS = {"alice": "a", "bob": "b", "carol": "c", "dave": "d"}
ACLS = [{"principal": "User:alice", "resource": "topic", "name": "*", "operations": ["describe"]},
        {"principal": "User:bob", "resource": "topic", "name": "b-*", "operations": ["describe", "create"]},
        {"principal": "User:carol", "resource": "topic", "name": "*", "operations": ["describe"]},
        {"principal": "User:carol", "resource": "cluster", "name": "kafka-cluster", "operations": ["create"]}]
TAF, UNKNOWN, INVALID = 29, 3, 17


def metadata(client: RawClient, names: list[str], create: bool = True) -> dict[str, int]:
    response = client.call(3, 12, {"topics": [{"name": n, "topic_id": None} for n in names],
                                   "allow_auto_topic_creation": create, "include_topic_authorized_operations": False})
    assert len(response.topics) == len(set(names))
    return {t.name: int(t.error_code) for t in response.topics}


def signed_in(server: Server, user: str) -> RawClient:
    client = RawClient(server.port, timeout=30)
    assert int(client.call(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
    assert int(client.call(36, 2, {"auth_bytes": f"\0{user}\0{USERS[user]}".encode()}).error_code) == 0
    return client


def test_metadata_auto_creates_only_for_a_caller_that_may_create(spark, root):
    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, auto_create_topics=True,
                                               security_protocol="SASL_PLAINTEXT", users=USERS, acls=ACLS)).run_in_thread()
    try:
        alice, bob, carol, dave = (signed_in(server, u) for u in ("alice", "bob", "carol", "dave"))
        assert metadata(alice, ["a-new", "bad name!"]) == {"a-new": TAF, "bad name!": TAF}  # describe, no create
        assert metadata(alice, ["a-new", "bad name!"], create=False) == {"a-new": UNKNOWN, "bad name!": INVALID}
        assert metadata(dave, ["d-new"]) == {"d-new": TAF}  # not even describe
        assert metadata(bob, ["b-new", "x-new"]) == {"b-new": 0, "x-new": TAF}  # create on b-* only
        assert metadata(carol, ["c-new", "bad name!", "c-new"]) == {"c-new": 0, "bad name!": INVALID}  # on the cluster
        assert sorted(server.ctx.topics()) == ["b-new", "c-new"]
        for client in (alice, bob, carol, dave):
            client.close()
    finally:
        stopped_with_no_task_left(server)


def test_an_illegal_topic_name_is_invalid_and_each_name_is_answered_once(served):
    served.ctx.admin.create("orders", 1)
    client = RawClient(served.port)
    names = ["orders", "bad name!", "x" * 250, "..", "missing", "orders", "bad name!"]
    assert metadata(client, names) == {"orders": 0, "bad name!": INVALID, "x" * 250: INVALID, "..": INVALID,
                                       "missing": UNKNOWN}
    client.close()
