"""Kafka's admin clients (librdkafka through confluent-kafka, kafka-python) against lakelog serve,
as a user of Kafka drives them: listing every topic, creating topics with a bad partition count,
switching a topic to LogAppendTime with IncrementalAlterConfigs, and deleting a group; each answer
is the one a Kafka broker gives."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.serve.conftest import bootstrap

pytestmark = pytest.mark.kafka_clients


def test_librdkafka_lists_every_topic(served):
    # librdkafka's Metadata request for every topic carries three stray bytes after its null topic
    # array; Kafka's broker answers it, and so must the server (it used to close the connection)
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    for name in ("orders", "payments"):
        admin.create_topics([NewTopic(name, 2)])[name].result(60)
    assert {"orders", "payments"} <= set(admin.list_topics(timeout=30).topics)
    producer = Producer({"bootstrap.servers": boot})
    listed = producer.list_topics(timeout=30).topics
    assert {len(listed["orders"].partitions), len(listed["payments"].partitions)} == {2}


def test_a_partition_count_of_zero_or_below_minus_one_is_invalid_partitions(served):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KafkaPythonTopic
    from kafka.errors import InvalidPartitionsError

    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("none", 0)])["none"].result(60)
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert "0 partitions" in refused.value.args[0].str()
    old = KafkaAdminClient(bootstrap_servers=boot)
    try:
        with pytest.raises(InvalidPartitionsError):
            old.create_topics([KafkaPythonTopic("negative", -3, 1)])
        old.create_topics([KafkaPythonTopic("defaulted", -1, 1)])  # -1: the server's default count
    finally:
        old.close()
    listed = admin.list_topics(timeout=30).topics
    assert "none" not in listed and "negative" not in listed
    assert len(listed["defaulted"].partitions) == 1


def test_incremental_alter_configs_switches_a_topic_to_log_append_time(served):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("stamped", 1)])["stamped"].result(60)
    change = ConfigResource("topic", "stamped", incremental_configs=[
        ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(60)
    shown = admin.describe_configs([ConfigResource("topic", "stamped")])
    assert next(iter(shown.values())).result(60)["message.timestamp.type"].value == "LogAppendTime"

    producer = Producer({"bootstrap.servers": boot})
    producer.produce("stamped", key=b"k", value=b"v", timestamp=1_000)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "stamps", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("stamped", 0, 0)])
    msg = consumer.poll(30)
    consumer.close()
    assert msg is not None and msg.error() is None
    kind, when = msg.timestamp()
    assert kind == 2 and when != 1_000  # TIMESTAMP_LOG_APPEND_TIME: the commit's time, not the producer's


def test_a_deleted_group_is_no_longer_listed(served):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("t", 1)])["t"].result(60)
    producer = Producer({"bootstrap.servers": boot})
    producer.produce("t", key=b"k", value=b"v")
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "gone", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    msg = consumer.poll(30)
    assert msg is not None and msg.error() is None
    consumer.commit(asynchronous=False)
    consumer.close()
    assert "gone" in {g.group_id for g in admin.list_consumer_groups().result(60).valid}

    admin.delete_consumer_groups(["gone"])["gone"].result(60)
    assert "gone" not in {g.group_id for g in admin.list_consumer_groups().result(60).valid}


def test_a_topic_name_kafka_cannot_take_is_invalid_topic_exception(served):
    admin = AdminClient({"bootstrap.servers": bootstrap(served)})
    for name in ("bad name", "a/b", "x" * 250):
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic(name, 1)])[name].result(60)
        assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, name  # INVALID_TOPIC_EXCEPTION, 17
        assert "invalid topic name" in refused.value.args[0].str()
    assert not {"bad name", "a/b"} & set(admin.list_topics(timeout=30).topics)


def test_create_partitions_to_the_count_a_topic_has_says_it_has_it(served):
    from confluent_kafka.admin import NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap(served)})
    admin.create_topics([NewTopic("t", 2)])["t"].result(60)
    for count, said in ((2, "already has 2 partitions"), (1, "to shrink: lakelog topics alter --partitions 1")):
        with pytest.raises(KafkaException) as refused:
            admin.create_partitions([NewPartitions("t", count)])["t"].result(60)
        assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
        assert said in refused.value.args[0].str() and ("shrink" in said) == ("shrink" in refused.value.args[0].str())


def test_create_topics_refuses_an_unknown_config_and_takes_kafkas_others(served):
    """Kafka refuses a topic config it does not know, and so does the server, creating nothing;
    Kafka's own configs lakelog has no use for (segments, compression, min.insync.replicas: what
    Kafka Connect sends with its topics) are taken and not kept."""
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("odd", 1, config={"flux.capacitor": "1"})])["odd"].result(60)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "flux.capacitor" in refused.value.args[0].str()
    admin.create_topics([NewTopic("kept", 1, config={"segment.ms": "60000", "min.insync.replicas": "2",
                                                      "retention.ms": "86400000"})])["kept"].result(60)
    listed = admin.list_topics(timeout=30).topics
    assert "odd" not in listed and "kept" in listed
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "kept")])
    configs = next(iter(described.values())).result(60)
    assert configs["retention.ms"].value == "86400000"
    assert "segment.ms" not in configs
