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
