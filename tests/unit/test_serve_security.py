"""Per-principal permissions (serve.security.allowed): Kafka's implications, names and prefixes."""

from serve.security import Acl, allowed

ACLS = [Acl(principal="User:alice", resource="topic", name="orders", operations=["write"]),
        Acl(principal="User:alice", resource="group", name="billing*", operations=["read"]),
        Acl(principal="User:*", resource="topic", name="public", operations=["read"]),
        Acl(principal="User:ops", resource="cluster", name="kafka-cluster", operations=["create"])]


def test_without_acls_everyone_may_do_everything():
    assert allowed(None, [], "User:ANONYMOUS", "WRITE", "TOPIC", "x")


def test_an_entry_allows_its_operation_and_what_kafka_implies_and_nothing_else():
    assert allowed(ACLS, [], "User:alice", "WRITE", "TOPIC", "orders")
    assert allowed(ACLS, [], "User:alice", "DESCRIBE", "TOPIC", "orders")  # write implies describe
    assert not allowed(ACLS, [], "User:alice", "READ", "TOPIC", "orders")
    assert not allowed(ACLS, [], "User:alice", "WRITE", "TOPIC", "orders2")
    assert not allowed(ACLS, [], "User:bob", "WRITE", "TOPIC", "orders")


def test_prefixes_wildcard_principals_super_users_and_cluster_create():
    assert allowed(ACLS, [], "User:alice", "READ", "GROUP", "billing-eu")
    assert not allowed(ACLS, [], "User:alice", "READ", "GROUP", "other")
    assert allowed(ACLS, [], "User:bob", "READ", "TOPIC", "public")
    assert allowed(ACLS, ["User:root"], "User:root", "DELETE", "TOPIC", "anything")
    assert allowed(ACLS, [], "User:ops", "CREATE", "TOPIC", "new-topic")
    assert not allowed(ACLS, [], "User:alice", "CREATE", "TOPIC", "orders")
