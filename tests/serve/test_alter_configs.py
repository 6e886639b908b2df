"""Kafka's legacy AlterConfigs (API 33) from Kafka's admin clients, answered as Kafka's broker does:
a topic's configs become the ones sent (any other back to its default), a bad value changes
nothing, validate_only changes nothing, an unknown topic or a broker config is refused."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.serve.conftest import bootstrap
from tests.serve.raw import RawClient

pytestmark = pytest.mark.kafka_clients


def _configs(admin: AdminClient, topic: str) -> dict:
    shown = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return {k: (v.value, v.source) for k, v in next(iter(shown.values())).result(60).items()}


def _alter(admin: AdminClient, topic: str, configs: dict, validate_only: bool = False) -> None:
    """librdkafka's AlterConfigs (deprecated in its API, sent as is: API 33)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=configs)
    admin.alter_configs([resource], validate_only=validate_only)[resource].result(60)


def test_alter_configs_replaces_a_topics_configs(served):
    admin = AdminClient({"bootstrap.servers": bootstrap(served)})
    admin.create_topics([NewTopic("facts", 1, config={"retention.ms": "60000"})])["facts"].result(60)
    _alter(admin, "facts", {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"})
    shown = _configs(admin, "facts")
    assert shown["cleanup.policy"] == ("compact", 1)  # DYNAMIC_TOPIC_CONFIG
    assert shown["min.compaction.lag.ms"] == ("1000", 1)
    assert shown["retention.ms"] == ("-1", 5)  # not sent: back to its default (DEFAULT_CONFIG)

    _alter(admin, "facts", {"cleanup.policy": "compact,delete"})
    shown = _configs(admin, "facts")
    assert shown["cleanup.policy"] == ("compact,delete", 1)
    assert shown["min.compaction.lag.ms"] == ("0", 5)


def test_alter_configs_back_to_create_time_switches_the_log(served):
    """A config left out goes back to its default in the log too: message.timestamp.type, which the
    log's own property decides, is CreateTime again."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("stamped", 1, config={"message.timestamp.type": "LogAppendTime"})])["stamped"].result(60)
    _alter(admin, "stamped", {"retention.ms": "86400000"})
    assert _configs(admin, "stamped")["message.timestamp.type"] == ("CreateTime", 5)
    producer = Producer({"bootstrap.servers": boot})
    producer.produce("stamped", key=b"k", value=b"v", timestamp=1_000)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "stamps", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("stamped", 0, 0)])
    msg = consumer.poll(30)
    consumer.close()
    assert msg is not None and msg.error() is None
    assert msg.timestamp() == (1, 1_000)  # TIMESTAMP_CREATE_TIME: the producer's


def test_an_invalid_value_is_invalid_config_and_changes_nothing(served):
    admin = AdminClient({"bootstrap.servers": bootstrap(served)})
    admin.create_topics([NewTopic("facts", 1, config={"retention.ms": "60000"})])["facts"].result(60)
    before = _configs(admin, "facts")
    for configs, said in (({"cleanup.policy": "shred"}, "cleanup.policy=shred"),
                          ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms=10"),
                          ({"segment.ms": "1000"}, "segment.ms")):
        with pytest.raises(KafkaException) as refused:
            _alter(admin, "facts", configs)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, configs
        assert said in refused.value.args[0].str()
        assert _configs(admin, "facts") == before


def test_validate_only_changes_nothing_and_an_unknown_topic_is_unknown(served):
    admin = AdminClient({"bootstrap.servers": bootstrap(served)})
    admin.create_topics([NewTopic("facts", 1)])["facts"].result(60)
    _alter(admin, "facts", {"cleanup.policy": "compact"}, validate_only=True)
    assert _configs(admin, "facts")["cleanup.policy"] == ("delete", 5)
    with pytest.raises(KafkaException) as refused:
        _alter(admin, "facts", {"cleanup.policy": "shred"}, validate_only=True)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    for validate_only in (True, False):
        with pytest.raises(KafkaException) as refused:
            _alter(admin, "missing", {"cleanup.policy": "compact"}, validate_only=validate_only)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "missing" not in admin.list_topics(timeout=30).topics


def test_kafka_python_alter_configs_keeps_what_it_describes(served):
    """kafka-python's alter_configs on AlterConfigs (incremental=False) sends the topic's other
    modified configs with the one it changes, so nothing else is reset."""
    from kafka.admin import ConfigResource as PyResource
    from kafka.admin import KafkaAdminClient

    boot = bootstrap(served)
    rd = AdminClient({"bootstrap.servers": boot})
    rd.create_topics([NewTopic("facts", 1)])["facts"].result(60)
    admin = KafkaAdminClient(bootstrap_servers=boot)
    try:
        assert admin.alter_configs([PyResource("TOPIC", "facts", {"cleanup.policy": "compact"})],
                                   incremental=False) == {"topic": {"facts": "OK"}}
        assert admin.alter_configs([PyResource("TOPIC", "facts", {"retention.ms": "60000"})],
                                   incremental=False) == {"topic": {"facts": "OK"}}
        answer = admin.alter_configs([PyResource("TOPIC", "facts", {"cleanup.policy": "shred"})], incremental=False)
        assert answer["topic"]["facts"].startswith("[Error 40] InvalidConfigurationError")
    finally:
        admin.close()
    shown = _configs(rd, "facts")
    assert shown["cleanup.policy"] == ("compact", 1) and shown["retention.ms"] == ("60000", 1)


def test_what_kafkas_broker_refuses_before_a_topic_is_invalid_request(served):
    served.ctx.admin.create("facts", 1)
    client = RawClient(served.port)

    def answer(resources):
        got = client.call(33, 2, {"resources": resources, "validate_only": False}).responses
        return [(r.resource_type, r.resource_name, int(r.error_code), r.error_message) for r in got]

    broker = str(served.ctx.node_id)
    try:
        assert answer([{"resource_type": 4, "resource_name": broker, "configs": []}]) == [(4, broker, 0, None)]
        (refused,) = answer([{"resource_type": 4, "resource_name": broker,
                              "configs": [{"name": "log.retention.ms", "value": "1"}]}])
        assert refused[2] == 42 and "Cannot update these configs dynamically" in refused[3]  # INVALID_REQUEST
        assert answer([{"resource_type": 4, "resource_name": "77", "configs": []}])[0][2] == 42
        assert answer([{"resource_type": 8, "resource_name": broker, "configs": []}])[0][2] == 42  # BROKER_LOGGER
        (refused,) = answer([{"resource_type": 2, "resource_name": "facts",
                              "configs": [{"name": "retention.ms", "value": None}]}])
        assert refused[2] == 42 and "Null value" in refused[3]
        (refused,) = answer([{"resource_type": 2, "resource_name": "facts",
                              "configs": [{"name": "retention.ms", "value": "1"}, {"name": "retention.ms", "value": "2"}]}])
        assert refused[2] == 42 and "duplicate" in refused[3]
        twice = answer([{"resource_type": 2, "resource_name": "facts",
                         "configs": [{"name": "retention.ms", "value": "1"}]}] * 2)
        assert [r[2] for r in twice] == [42, 42]
    finally:
        client.close()
    assert served.ctx.admin.describe("facts").config["retention.ms"] == "-1"
