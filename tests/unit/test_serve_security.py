"""Per-principal permissions (serve.security.allowed): Kafka's implications, names and prefixes;
PLAIN's password check."""

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


def test_a_plain_password_is_compared_in_constant_time(monkeypatch):
    import hmac

    import pytest

    from serve import security
    from serve.security import Authenticator

    compared, original = [], hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    users = {"alice": "alice-secret"}
    assert Authenticator("PLAIN", users, {}).step(b"\0alice\0alice-secret") == (b"", True)
    for token in (b"\0alice\0wrong", b"\0alice\0alice-secret2", b"\0alice\0"):
        with pytest.raises(ValueError, match="authentication failed for user 'alice'"):
            Authenticator("PLAIN", users, {}).step(token)
    assert compared == [(b"alice-secret", b"alice-secret"), (b"wrong", b"alice-secret"),
                        (b"alice-secret2", b"alice-secret"), (b"", b"alice-secret")]
    with pytest.raises(ValueError, match="authentication failed for user 'bob'"):
        Authenticator("PLAIN", users, {}).step(b"\0bob\0alice-secret")
    with pytest.raises(ValueError, match="malformed PLAIN token"):
        Authenticator("PLAIN", users, {}).step(b"alice\0alice-secret")
