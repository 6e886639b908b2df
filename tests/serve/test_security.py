"""TLS, SASL (PLAIN, SCRAM-SHA-256/512) and per-principal permissions: a principal without rights
gets Kafka's authorization error and nothing is written; a wrong password or a plaintext client
gets nowhere."""

from __future__ import annotations

import pytest
import trustme
from confluent_kafka import Producer as RdProducer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import (
    GroupAuthorizationFailedError, KafkaError, TopicAuthorizationFailedError,
)

from serve.server import Server
from serve.settings import ServeSettings
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ACLS = [{"principal": "User:alice", "resource": "topic", "name": "orders", "operations": ["read", "write"]},
        {"principal": "User:alice", "resource": "group", "name": "billing*", "operations": ["read"]}]


@pytest.fixture()
def tls(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return {"certfile": str(tmp_path / "server.pem"), "cafile": str(tmp_path / "ca.pem"), "ca": ca, "dir": tmp_path}


@pytest.fixture()
def secured(spark, root, tls):
    settings = ServeSettings(listen="127.0.0.1:0", linger_ms=5, security_protocol="SASL_SSL",
                             ssl_certfile=tls["certfile"], users=USERS, super_users=["User:admin"], acls=ACLS)
    server = Server(spark, root, settings).run_in_thread()
    yield server
    server.stop_thread()


def client_config(server, tls, user: str, mechanism: str = "PLAIN", password: str | None = None) -> dict:
    return {"bootstrap_servers": f"127.0.0.1:{server.port}", "security_protocol": "SASL_SSL",
            "ssl_cafile": tls["cafile"], "ssl_check_hostname": False, "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password or USERS[user]}


def test_principals_get_what_their_permissions_allow_and_nothing_is_written_without_them(secured, tls, root):
    KafkaAdminClient(**client_config(secured, tls, "admin")).create_topics([NewTopic("orders", 2, 1)])

    bob = KafkaProducer(**client_config(secured, tls, "bob", "SCRAM-SHA-256"), max_block_ms=20000, retries=0)
    with pytest.raises((TopicAuthorizationFailedError, KafkaError)):
        bob.send("orders", b"not allowed").get(30)
    bob.close()
    assert log_rows(root, "orders") == []

    alice = KafkaProducer(**client_config(secured, tls, "alice", "SCRAM-SHA-512"))
    for i in range(20):
        alice.send("orders", key=b"k%d" % i, value=b"v%d" % i)
    alice.flush()
    alice.close()
    rd = RdProducer({"bootstrap.servers": f"127.0.0.1:{secured.port}", "security.protocol": "SASL_SSL",
                     "ssl.ca.location": tls["cafile"], "ssl.endpoint.identification.algorithm": "none",
                     "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": USERS["alice"]})
    rd.produce("orders", value=b"from-librdkafka")
    assert rd.flush(60) == 0
    assert len(log_rows(root, "orders")) == 21

    reader = KafkaConsumer("orders", group_id="billing-1", auto_offset_reset="earliest", consumer_timeout_ms=20000,
                           **client_config(secured, tls, "alice"))
    assert len(list(reader)) == 21
    reader.close()
    outsider = KafkaConsumer("orders", group_id="other", auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             **client_config(secured, tls, "alice"))
    with pytest.raises(GroupAuthorizationFailedError):
        list(outsider)
    outsider.close(autocommit=False)


def test_altering_configs_takes_alter_configs_on_the_topic_or_the_cluster(secured, tls):
    """AlterConfigs and IncrementalAlterConfigs as Kafka authorizes them: ALTER_CONFIGS on the topic,
    or on the cluster for a broker's configs; a principal without it changes nothing."""
    from kafka.admin import ConfigResource

    KafkaAdminClient(**client_config(secured, tls, "admin")).create_topics([NewTopic("orders", 1, 1)])
    alice = KafkaAdminClient(**client_config(secured, tls, "alice"))
    topic = ConfigResource("TOPIC", "orders", {"retention.ms": "1000"})
    broker = ConfigResource("BROKER", str(secured.ctx.node_id), {})
    try:
        for incremental in (False, True):  # sent as given (alter_configs would describe first)
            answer = alice._manager.run(alice._send_alter_configs_requests, [topic, broker], False, incremental)
            assert answer["topic"]["orders"].startswith("[Error 29] TopicAuthorizationFailedError"), incremental
            assert answer["broker"][broker.name].startswith("[Error 31] ClusterAuthorizationFailedError")
    finally:
        alice.close()
    assert secured.ctx.admin.describe("orders").config["retention.ms"] == "-1"
    admin = KafkaAdminClient(**client_config(secured, tls, "admin"))
    try:
        assert admin._manager.run(admin._send_alter_configs_requests, [topic], False, False) == {
            "topic": {"orders": "OK"}}
    finally:
        admin.close()
    assert secured.ctx.admin.describe("orders").config["retention.ms"] == "1000"


def test_a_wrong_password_and_a_plaintext_client_are_refused(secured, tls):
    with pytest.raises(KafkaError):
        KafkaAdminClient(**client_config(secured, tls, "alice", "SCRAM-SHA-256", password="wrong"),
                         request_timeout_ms=5000).list_topics()
    with pytest.raises(KafkaError):
        KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{secured.port}", request_timeout_ms=5000,
                         api_version_auto_timeout_ms=5000).list_topics()


def test_a_tls_client_certificate_names_the_principal(spark, root, tls):
    client_cert = tls["ca"].issue_cert("alice.example", common_name="alice")
    path = tls["dir"] / "alice.pem"
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    settings = ServeSettings(listen="127.0.0.1:0", linger_ms=5, security_protocol="SSL", ssl_certfile=tls["certfile"],
                             ssl_cafile=tls["cafile"], ssl_client_auth=True, super_users=["User:admin"], acls=ACLS)
    server = Server(spark, root, settings).run_in_thread()
    try:
        server.ctx.admin.create("orders", 1)
        server.ctx.admin.create("secret", 1)
        config = {"bootstrap_servers": f"127.0.0.1:{server.port}", "security_protocol": "SSL",
                  "ssl_cafile": tls["cafile"], "ssl_certfile": str(path), "ssl_check_hostname": False}
        producer = KafkaProducer(**config, retries=0)
        producer.send("orders", b"ok").get(30)
        with pytest.raises((TopicAuthorizationFailedError, KafkaError)):
            producer.send("secret", b"no").get(30)
        producer.close()
    finally:
        server.stop_thread()
    assert [r["value"] for r in log_rows(root, "orders")] == [b"ok"] and log_rows(root, "secret") == []
