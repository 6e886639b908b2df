"""The lakelog data source's options follow Spark's Kafka source (pipelines.spark.options), no Spark."""

from __future__ import annotations

import pytest

from log_store.errors import InvalidConfigurationError, UnknownTopicError
from pipelines.spark.options import SinkOptions, parse_sink_options, parse_source_options
from pipelines.spark.specs import OffsetSpec, TimestampSpec
from pipelines.spark.positions import (
    bounds_to_read,
    ending_positions,
    resolve_topics,
    starting_positions,
    timestamp_targets,
)


def batch(**options) -> object:
    return parse_source_options({"subscribe": "orders", **options}, streaming=False)


def stream(**options) -> object:
    return parse_source_options({"subscribe": "orders", **options}, streaming=True)


def source_error(options: dict, streaming: bool = False) -> str:
    with pytest.raises(InvalidConfigurationError) as caught:
        parse_source_options(options, streaming=streaming)
    return str(caught.value)


def sink_error(options: dict) -> str:
    with pytest.raises(InvalidConfigurationError) as caught:
        parse_sink_options(options)
    return str(caught.value)


# -- defaults and plain values --------------------------------------------------------------------
def test_defaults_follow_spark_for_batch_and_stream():
    b = batch()
    assert b.streaming is False and b.root is None and b.group is None
    assert b.subscribe == ("orders",) and b.subscribe_pattern is None and b.assign is None
    assert b.starting == OffsetSpec(kind="earliest") and b.ending == OffsetSpec(kind="latest")
    assert b.fail_on_data_loss is True and b.include_headers is False and b.max_offsets_per_trigger is None
    s = stream()
    assert s.streaming is True
    assert s.starting == OffsetSpec(kind="latest") and s.ending is None


def test_every_option_read_with_good_values():
    s = parse_source_options({
        "root": " s3://bucket/lakelog ", "subscribe": "orders, payments,,orders", "startingOffsets": "earliest",
        "failOnDataLoss": "false", "maxOffsetsPerTrigger": "1000", "includeHeaders": "TRUE", "group": "billing.svc",
        "checkpointLocation": "/chk/q1",
    }, streaming=True)
    assert s.root == "s3://bucket/lakelog"
    assert s.subscribe == ("orders", "payments")  # trimmed, empties dropped, repeats once, order kept
    assert s.starting == OffsetSpec(kind="earliest")
    assert s.fail_on_data_loss is False and s.include_headers is True
    assert s.max_offsets_per_trigger == 1000 and s.group == "billing.svc"
    assert s.strategy == "subscribe"


def test_keys_are_case_insensitive_as_spark_passes_them():
    lower = parse_source_options({"subscribepattern": "orders.*", "startingoffsets": "EARLIEST",
                                  "failondataloss": "False", "maxoffsetspertrigger": "5",
                                  "includeheaders": "true", "ROOT": "/data"}, streaming=True)
    assert lower.subscribe_pattern == "orders.*" and lower.strategy == "subscribePattern"
    assert lower.starting == OffsetSpec(kind="earliest")
    assert lower.fail_on_data_loss is False and lower.max_offsets_per_trigger == 5
    assert lower.include_headers is True and lower.root == "/data"


def test_an_option_given_twice_in_two_spellings_is_an_error():
    message = source_error({"subscribe": "a", "startingOffsets": "earliest", "STARTINGOFFSETS": "latest"})
    assert "startingOffsets is given twice" in message and "'STARTINGOFFSETS'" in message and "give it once" in message


def test_messages_use_sparks_spelling_of_a_lower_cased_key():
    message = source_error({"subscribe": "a", "failondataloss": "maybe"})
    assert message == "failOnDataLoss must be true or false, not 'maybe'"


def test_python_booleans_and_numbers_read_as_pyspark_writes_them():
    s = parse_source_options({"subscribe": "a", "includeHeaders": True, "maxOffsetsPerTrigger": 7}, streaming=True)
    assert s.include_headers is True and s.max_offsets_per_trigger == 7


# -- which topics: subscribe, subscribePattern, assign ----------------------------------------------
def test_exactly_one_of_subscribe_pattern_assign():
    none = source_error({"root": "/data"})
    assert "exactly one of subscribe" in none and "subscribePattern" in none and "assign" in none
    assert "got none" in none
    two = source_error({"subscribe": "a", "assign": '{"a":[0]}'})
    assert "exactly one of subscribe" in two and "got subscribe and assign" in two
    three = source_error({"subscribe": "a", "SubscribePattern": "a.*", "assign": '{"a":[0]}'})
    assert "got subscribe and subscribePattern and assign" in three


def test_subscribe_with_no_topics():
    message = source_error({"subscribe": " , ,"})
    assert message.startswith("subscribe names no topics") and "comma-separated list" in message


def test_subscribe_pattern_must_compile_and_not_be_empty():
    bad = source_error({"subscribePattern": "orders.(*"})
    assert bad.startswith("subscribePattern: 'orders.(*' is not a valid regular expression")
    assert "matches whole topic names" in bad
    empty = source_error({"subscribePattern": "  "})
    assert empty.startswith("subscribePattern is empty") and "regular expression" in empty


def test_assign_reads_topics_and_partitions():
    s = parse_source_options({"assign": '{"orders":[3,0,1,0],"payments":[2]}'}, streaming=False)
    assert s.assign == {"orders": (0, 1, 3), "payments": (2,)} and s.strategy == "assign"


@pytest.mark.parametrize("value, fragment", [
    ('{"orders":[0,1]', "assign: malformed JSON at line 1 column 16"),
    ("orders", "assign: malformed JSON at line 1 column 1"),
    ('["orders"]', "assign: expected JSON"),
    ("{}", "assign: expected JSON"),
    ('{"orders":[]}', "topic 'orders' must have a non-empty list of partition numbers"),
    ('{"orders":0}', "topic 'orders' must have a non-empty list of partition numbers"),
    ('{"orders":[-1]}', "assign: -1 under topic 'orders' is not a partition number"),
    ('{"orders":[true]}', "assign: True under topic 'orders' is not a partition number"),
    ('{"orders":[1.5]}', "assign: 1.5 under topic 'orders' is not a partition number"),
    ('{"":[0]}', "assign: a topic name is empty"),
    ('{"orders":[0],"orders":[1]}', "assign: key 'orders' appears twice in one JSON object"),
])
def test_bad_assign(value, fragment):
    message = source_error({"assign": value})
    assert fragment in message
    assert '{"orders":[0,1],"payments":[2,4]}' in message  # says what to write


# -- startingOffsets / endingOffsets ----------------------------------------------------------------
def test_starting_offsets_json():
    s = stream(startingOffsets=' {"orders":{"0":23,"1":-1,"2":-2},"payments":{"0":0}} ')
    assert s.starting == OffsetSpec(kind="json", offsets={"orders": {0: 23, 1: -1, 2: -2}, "payments": {0: 0}})


def test_starting_offsets_latest_is_for_streams_only():
    assert stream(startingOffsets="Latest").starting == OffsetSpec(kind="latest")
    message = source_error({"subscribe": "orders", "startingOffsets": "latest"})
    assert message.startswith('startingOffsets: "latest" is not allowed for batch queries')
    assert 'use "earliest"' in message


def test_starting_offsets_json_minus_one_is_for_streams_only():
    message = source_error({"subscribe": "orders", "startingOffsets": '{"orders":{"0":5,"1":-1}}'})
    assert message.startswith("startingOffsets: -1 (latest) for topic 'orders' partition 1 is not allowed for batch")
    assert "-2 for earliest" in message
    assert stream(startingOffsets='{"orders":{"1":-1}}').starting.offsets == {"orders": {1: -1}}


@pytest.mark.parametrize("value, fragment", [
    ('{"orders":{"0":23}', "startingOffsets: malformed JSON at line 1 column 19"),
    ("earlist", "startingOffsets: malformed JSON at line 1 column 1"),
    ('{"orders":{"0":-3}}', "startingOffsets: offset -3 for topic 'orders' partition 0 is not an offset"),
    ('{"orders":{"x":1}}', "startingOffsets: 'x' under topic 'orders' is not a partition number"),
    ('{"orders":{"-1":1}}', "startingOffsets: '-1' under topic 'orders' is not a partition number"),
    ('{"orders":{"0":"23"}}', "the value for topic 'orders' partition 0 is '23', not a whole number"),
    ('{"orders":{"0":2.5}}', "the value for topic 'orders' partition 0 is 2.5, not a whole number"),
    ('{"orders":{"0":1,"00":2}}', "startingOffsets: topic 'orders' names partition 0 twice"),
    ('{"orders":{"0":1,"0":2}}', "startingOffsets: key '0' appears twice in one JSON object"),
    ('{"orders":[0]}', "startingOffsets: topic 'orders' must map partition numbers to values"),
    ('{"orders":{}}', "startingOffsets: topic 'orders' must map partition numbers to values"),
    ("{}", "startingOffsets: expected"),
    ("23", "startingOffsets: expected"),
])
def test_bad_starting_offsets(value, fragment):
    message = source_error({"subscribe": "orders", "startingOffsets": value}, streaming=True)
    assert fragment in message
    assert "-2 for earliest" in message and "-1 for latest" in message


def test_ending_offsets():
    assert batch(endingOffsets="LATEST").ending == OffsetSpec(kind="latest")
    s = batch(endingOffsets='{"orders":{"0":100,"1":-1}}')
    assert s.ending == OffsetSpec(kind="json", offsets={"orders": {0: 100, 1: -1}})


def test_ending_offsets_earliest_is_not_an_end():
    message = source_error({"subscribe": "orders", "endingOffsets": "earliest"})
    assert message.startswith('endingOffsets: "earliest" is not an ending offset') and 'use "latest"' in message
    message = source_error({"subscribe": "orders", "endingOffsets": '{"orders":{"0":-2}}'})
    assert message.startswith("endingOffsets: -2 (earliest) for topic 'orders' partition 0 is not an ending offset")
    message = source_error({"subscribe": "orders", "endingOffsets": '{"orders":{"0":-5}}'})
    assert "endingOffsets: offset -5 for topic 'orders' partition 0 is not an offset" in message
    message = source_error({"subscribe": "orders", "endingOffsets": '{"orders":{"0":1'})
    assert message.startswith("endingOffsets: malformed JSON at line 1") and "-1 for latest" in message


def test_ending_offsets_is_for_batch_queries():
    message = source_error({"subscribe": "orders", "EndingOffsets": "latest"}, streaming=True)
    assert message.startswith("endingOffsets is for batch queries") and "spark.read" in message


def test_explicit_start_and_end_name_the_same_partitions_and_start_first():
    ok = batch(startingOffsets='{"orders":{"0":5,"1":-2}}', endingOffsets='{"orders":{"0":5,"1":3}}')
    assert ok.starting.offsets == {"orders": {0: 5, 1: -2}} and ok.ending.offsets == {"orders": {0: 5, 1: 3}}
    after = source_error({"subscribe": "orders", "startingOffsets": '{"orders":{"0":9}}',
                          "endingOffsets": '{"orders":{"0":4}}'})
    assert after.startswith("startingOffsets for topic 'orders' partition 0 (9) is after its endingOffsets (4)")
    differ = source_error({"subscribe": "orders", "startingOffsets": '{"orders":{"0":1,"1":1}}',
                           "endingOffsets": '{"orders":{"0":4,"2":4}}'})
    assert "must name the same partitions" in differ
    assert "only in startingOffsets: 'orders' partition 1; only in endingOffsets: 'orders' partition 2" in differ


# -- timestamps and their precedence -----------------------------------------------------------------
def test_starting_timestamp():
    assert stream(startingTimestamp=" 1700000000000 ").starting == TimestampSpec(timestamp=1700000000000)
    for bad in ("-1", "1.7e12", "soon", ""):
        message = source_error({"subscribe": "orders", "startingTimestamp": bad})
        assert message.startswith("startingTimestamp must be milliseconds since the epoch"), bad


def test_starting_offsets_by_timestamp():
    s = batch(startingOffsetsByTimestamp='{"orders":{"0":1000,"1":2000}}')
    assert s.starting == TimestampSpec(timestamps={"orders": {0: 1000, 1: 2000}})
    negative = source_error({"subscribe": "orders", "startingOffsetsByTimestamp": '{"orders":{"0":-1}}'})
    assert negative.startswith("startingOffsetsByTimestamp: timestamp -1 for topic 'orders' partition 0 is negative")
    malformed = source_error({"subscribe": "orders", "startingOffsetsByTimestamp": "1000"})
    assert malformed.startswith("startingOffsetsByTimestamp: expected JSON") and "epoch_milliseconds" in malformed


def test_timestamp_options_take_precedence_in_sparks_order():
    everything = {"startingTimestamp": "500", "startingOffsetsByTimestamp": '{"orders":{"0":1000}}',
                  "startingOffsets": "earliest"}
    assert stream(**everything).starting == TimestampSpec(timestamp=500)
    del everything["startingTimestamp"]
    assert stream(**everything).starting == TimestampSpec(timestamps={"orders": {0: 1000}})
    del everything["startingOffsetsByTimestamp"]
    assert stream(**everything).starting == OffsetSpec(kind="earliest")


def test_an_overridden_latest_start_is_allowed_in_batch_but_a_malformed_one_is_not():
    assert batch(startingTimestamp="5", startingOffsets="latest").starting == TimestampSpec(timestamp=5)
    message = source_error({"subscribe": "orders", "startingTimestamp": "5", "startingOffsets": "{"})
    assert message.startswith("startingOffsets: malformed JSON")


# -- failOnDataLoss, maxOffsetsPerTrigger, includeHeaders, group, root ------------------------------
@pytest.mark.parametrize("option", ["failOnDataLoss", "includeHeaders"])
def test_booleans(option):
    attribute = {"failOnDataLoss": "fail_on_data_loss", "includeHeaders": "include_headers"}[option]
    assert getattr(batch(**{option: "true"}), attribute) is True
    assert getattr(batch(**{option: " False "}), attribute) is False
    message = source_error({"subscribe": "orders", option: "yes"})
    assert message == f"{option} must be true or false, not 'yes'"


@pytest.mark.parametrize("value", ["0", "-10", "ten", "1.5", "1e3", "1_000", ""])
def test_max_offsets_per_trigger_must_be_positive(value):
    message = source_error({"subscribe": "orders", "maxOffsetsPerTrigger": value}, streaming=True)
    assert message.startswith("maxOffsetsPerTrigger must be a positive number of records")


def test_max_offsets_per_trigger_is_checked_but_ignored_in_batch():
    assert batch(maxOffsetsPerTrigger="100").max_offsets_per_trigger is None
    assert "maxOffsetsPerTrigger must be a positive number" in source_error(
        {"subscribe": "orders", "maxOffsetsPerTrigger": "0"})


def test_empty_group_and_root():
    assert source_error({"subscribe": "orders", "group": " "}).startswith("invalid group id ' '")
    assert source_error({"subscribe": "orders", "group": "g\n"}).startswith("invalid group id 'g\\n'")
    root = source_error({"subscribe": "orders", "root": ""})
    assert root.startswith("root is empty") and "leave the option out" in root


def test_none_as_a_value():
    assert source_error({"subscribe": "orders", "group": None}) == (
        "group: no value given; give one or leave the option out")


# -- keys lakelog does not take ---------------------------------------------------------------------
def test_unknown_options_are_listed_with_the_known_ones():
    message = source_error({"subscribe": "orders", "startingOfsets": "earliest", "maxFilesPerTrigger": "4"})
    assert message.startswith("unknown option(s) 'maxFilesPerTrigger', 'startingOfsets' for the lakelog source")
    assert "startingOffsets" in message and "maxOffsetsPerTrigger" in message and "subscribePattern" in message
    assert "for the lakelog stream source" in source_error({"subscribe": "o", "x": "1"}, streaming=True)


def test_path_says_to_use_root():
    message = source_error({"subscribe": "orders", "path": "/data/lakelog"})
    assert message.startswith("option 'path' ('/data/lakelog')") and ".option('root', ...)" in message


def test_kafka_options_say_lakelog_is_no_broker():
    message = source_error({"subscribe": "orders", "kafka.bootstrap.servers": "host:9092"})
    assert message.startswith("option 'kafka.bootstrap.servers': lakelog is not a Kafka broker")
    assert "use root" in message
    assert "lakelog is not a Kafka broker" in source_error({"subscribe": "orders", "Kafka.Group.Id": "g"})


def test_checkpoint_location_is_accepted_and_ignored():
    assert batch(checkpointLocation="/chk") == batch()
    assert parse_sink_options({"CHECKPOINTLOCATION": "/chk"}) == SinkOptions()


def test_storage_options_pass_through_under_their_prefix():
    s = batch(**{"storage.AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "storage.aws_secret_access_key": "hush",
                 "Storage.Retry_Timeout": "5s"})
    assert s.storage == {"aws_endpoint_url": "http://127.0.0.1:9000", "aws_secret_access_key": "hush",
                         "retry_timeout": "5s"}, "keys lower-cased, as PySpark passes them"
    assert "hush" not in repr(s), "secrets stay out of the options' repr"
    assert batch().storage == {}
    assert parse_sink_options({"storage.aws_region": "eu-west-1"}).storage == {"aws_region": "eu-west-1"}


def test_bad_storage_options():
    assert source_error({"subscribe": "orders", "storage.": "x"}).startswith(
        "option 'storage.' names no storage option: write storage.<key>")
    assert source_error({"subscribe": "orders", "storage.AWS_REGION": "a", "storage.aws_region": "b"}) == (
        "storage option 'aws_region' is given twice: give it once")
    assert "no value given" in source_error({"subscribe": "orders", "storage.aws_region": None})
    assert "storage.<key> for a remote root's storage options" in source_error({"subscribe": "o", "x": "1"})


# -- roots ---------------------------------------------------------------------------------------------
def test_a_root_is_a_local_path_or_a_uri_delta_rs_reads(tmp_path, monkeypatch):
    from pipelines.spark.roots import resolve_root

    monkeypatch.chdir(tmp_path)
    assert resolve_root("data/root", None) == str(tmp_path / "data" / "root"), "absolute, on the driver"
    assert resolve_root(None, "file:/x/root") == "/x/root"
    assert resolve_root("s3a://bucket/lakelog/", "/ignored") == "s3a://bucket/lakelog"
    for uri in ("s3://b/r", "gs://b/r", "abfss://c@a.dfs.core.windows.net/r", "az://c/r"):
        assert resolve_root(uri, None) == uri
    with pytest.raises(InvalidConfigurationError, match="cannot open Databricks' dbfs:/ paths; give the object store URI"):
        resolve_root("dbfs:/lakelog", None)
    with pytest.raises(InvalidConfigurationError, match="does not open wasbs:// here; give a local path or a URI"):
        resolve_root("wasbs://c@a.blob.core.windows.net/r", None)
    with pytest.raises(InvalidConfigurationError, match="no lakelog root"):
        resolve_root(None, None)


def test_writes_take_local_and_s3_roots_only(tmp_path):
    from pipelines.spark.roots import resolve_root

    assert resolve_root(str(tmp_path), None, writing=True) == str(tmp_path)
    assert resolve_root("s3a://bucket/lakelog/", None, writing=True) == "s3a://bucket/lakelog"
    assert resolve_root("s3://bucket/lakelog", None, writing=True) == "s3://bucket/lakelog"
    with pytest.raises(InvalidConfigurationError, match="writes to local and S3 roots"):
        resolve_root("gs://bucket/lakelog", None, writing=True)


# -- sink ----------------------------------------------------------------------------------------------
def test_sink_options():
    assert parse_sink_options({}) == SinkOptions(root=None, topic=None, producer_id=None)
    s = parse_sink_options({"Root": "/data", "topic": " orders ", "producerid": "orders-feed"})
    assert s == SinkOptions(root="/data", topic="orders", producer_id="orders-feed")


def test_bad_sink_options():
    unknown = sink_error({"topic": "orders", "subscribe": "orders"})
    assert unknown.startswith("unknown option(s) 'subscribe' for the lakelog sink")
    assert "root, topic, producerId" in unknown
    path = sink_error({"path": "/x"})
    assert "takes no path" in path and ".option('root', ...)" in path and ".option('topic', ...)" in path
    assert "lakelog is not a Kafka broker" in sink_error({"kafka.acks": "all"})
    assert sink_error({"topic": " "}).startswith("topic is empty")
    assert sink_error({"producerId": ""}).startswith("producerId is empty: give an idempotent producer id")


# -- resolve_topics --------------------------------------------------------------------------------
KNOWN = ["orders", "orders.v1", "payments", "audit-orders"]


def test_resolve_subscribe():
    assert resolve_topics(batch(subscribe="payments,orders"), KNOWN) == ["orders", "payments"]
    with pytest.raises(UnknownTopicError) as caught:
        resolve_topics(batch(subscribe="orders,refunds,zz"), KNOWN)
    message = str(caught.value)
    assert message.startswith("subscribe names topic(s) that do not exist under this root: 'refunds', 'zz'")
    assert "`lakelog topics list`" in message


def test_resolve_pattern_matches_whole_names():
    opts = parse_source_options({"subscribePattern": "orders.*"}, streaming=True)
    assert resolve_topics(opts, KNOWN) == ["orders", "orders.v1"]  # not audit-orders: a whole-name match
    assert resolve_topics(parse_source_options({"subscribePattern": "order"}, streaming=True), KNOWN) == []
    assert resolve_topics(parse_source_options({"subscribePattern": "refunds"}, streaming=True), KNOWN) == []


def test_resolve_assign():
    opts = parse_source_options({"assign": '{"payments":[0],"orders":[1]}'}, streaming=False)
    assert resolve_topics(opts, KNOWN) == ["orders", "payments"]
    with pytest.raises(UnknownTopicError) as caught:
        resolve_topics(parse_source_options({"assign": '{"refunds":[0],"orders":[1]}'}, streaming=False), KNOWN)
    assert str(caught.value).startswith("assign names topic(s) that do not exist under this root: 'refunds';")


BOUNDS = {
    "orders": {0: (0, 100), 1: (10, 50), 2: (0, 0)},
    "payments": {0: (5, 9)},
}


def test_bounds_to_read():
    assert bounds_to_read(batch(subscribe="orders"), BOUNDS) == {"orders": BOUNDS["orders"]}
    assign = parse_source_options({"assign": '{"orders":[2,0]}'}, streaming=False)
    assert bounds_to_read(assign, BOUNDS) == {"orders": {0: (0, 100), 2: (0, 0)}}
    missing = parse_source_options({"assign": '{"orders":[0,7]}'}, streaming=False)
    with pytest.raises(InvalidConfigurationError) as caught:
        bounds_to_read(missing, BOUNDS)
    assert str(caught.value).startswith("assign names partition(s) 7 of topic 'orders', which has partitions 0, 1, 2")


# -- positions ---------------------------------------------------------------------------------------
def test_earliest_and_latest_positions():
    assert starting_positions(OffsetSpec(kind="earliest"), BOUNDS) == {
        "orders": {0: 0, 1: 10, 2: 0}, "payments": {0: 5}}
    assert starting_positions(OffsetSpec(kind="latest"), BOUNDS) == {
        "orders": {0: 100, 1: 50, 2: 0}, "payments": {0: 9}}
    assert ending_positions(OffsetSpec(kind="latest"), BOUNDS) == {
        "orders": {0: 100, 1: 50, 2: 0}, "payments": {0: 9}}


def test_json_positions_map_sentinels_and_keep_explicit_offsets():
    spec = OffsetSpec(kind="json", offsets={"orders": {0: 42, 1: -2, 2: -1}, "payments": {0: 3}})
    # 3 is below payments' earliest (5): kept, the caller decides whether that is data loss
    assert starting_positions(spec, BOUNDS) == {"orders": {0: 42, 1: 10, 2: 0}, "payments": {0: 3}}
    end = OffsetSpec(kind="json", offsets={"orders": {0: 60, 1: -1, 2: 0}, "payments": {0: -1}})
    assert ending_positions(end, BOUNDS) == {"orders": {0: 60, 1: 50, 2: 0}, "payments": {0: 9}}


def position_error(spec: OffsetSpec, ending: bool = False) -> str:
    with pytest.raises(InvalidConfigurationError) as caught:
        (ending_positions if ending else starting_positions)(spec, BOUNDS)
    return str(caught.value)


def test_json_positions_must_name_exactly_the_partitions_read():
    whole = {"orders": {0: 1, 1: 1, 2: 1}, "payments": {0: 6}}
    extra_topic = position_error(OffsetSpec(kind="json", offsets={**whole, "refunds": {0: 1}}))
    assert extra_topic.startswith("startingOffsets names topic 'refunds', which this read does not cover")
    missing_topic = position_error(OffsetSpec(kind="json", offsets={"orders": whole["orders"]}), ending=True)
    assert missing_topic.startswith("endingOffsets JSON must name every partition the read covers: "
                                    "topic 'payments' is missing")
    missing_partition = position_error(OffsetSpec(kind="json", offsets={**whole, "orders": {0: 1}}))
    assert missing_partition.startswith("startingOffsets JSON must name every partition the read covers: "
                                        "topic 'orders' lacks partition(s) 1, 2")
    assert "-2 for earliest or -1 for latest" in missing_partition
    extra_partition = position_error(OffsetSpec(kind="json", offsets={**whole, "payments": {0: 6, 3: 1}}))
    assert extra_partition.startswith("startingOffsets names partition(s) 3 of topic 'payments', which the read "
                                      "does not cover (its partitions: 0)")


def test_earliest_is_no_end_for_ending_positions():
    assert "earliest (-2) is not an ending offset" in position_error(OffsetSpec(kind="earliest"), ending=True)
    spec = OffsetSpec(kind="json", offsets={"orders": {0: -2, 1: 1, 2: 1}, "payments": {0: 6}})
    assert position_error(spec, ending=True).startswith("endingOffsets: earliest (-2) is not an ending offset")


def test_offset_spec_shape():
    with pytest.raises(ValueError):
        OffsetSpec(kind="json")
    with pytest.raises(ValueError):
        OffsetSpec(kind="latest", offsets={"orders": {0: 1}})
    with pytest.raises(ValueError):
        TimestampSpec()
    with pytest.raises(ValueError):
        TimestampSpec(timestamp=1, timestamps={"orders": {0: 1}})


def test_timestamp_targets():
    partitions = {"orders": [1, 0], "payments": [0]}
    assert timestamp_targets(TimestampSpec(timestamp=7), partitions) == {"orders": {0: 7, 1: 7}, "payments": {0: 7}}
    spec = TimestampSpec(timestamps={"orders": {1: 20, 0: 10}, "payments": {0: 5}})
    assert timestamp_targets(spec, partitions) == {"orders": {0: 10, 1: 20}, "payments": {0: 5}}
    with pytest.raises(InvalidConfigurationError) as caught:
        timestamp_targets(TimestampSpec(timestamps={"orders": {0: 10}}), partitions)
    assert str(caught.value).startswith("startingOffsetsByTimestamp JSON must name every partition the read covers")


def test_ranges_are_packed_into_about_one_task_per_share_of_records():
    from pipelines.spark.tasks import pack

    assert pack([]) == []
    small = [(p, 0, 10) for p in range(64)]
    assert pack(small, task_records=1000) == [sorted(small)], "a small batch is one task"
    big = [(p, 0, 100) for p in range(8)]
    tasks = pack(big, task_records=200)
    assert len(tasks) == 5 and sorted(s for t in tasks for s in t) == big, "every range once"
    assert len(pack([(0, 0, 10**6)], task_records=10)) == 1, "never more tasks than ranges"


# -- Spark's Kafka options with their meanings here ---------------------------------------------------
def test_trigger_limits_and_the_delay_follow_spark():
    s = stream(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="500", maxTriggerDelay="30s")
    assert (s.min_offsets_per_trigger, s.max_offsets_per_trigger, s.max_trigger_delay_ms) == (100, 500, 30_000)
    assert stream().max_trigger_delay_ms == 15 * 60 * 1000, "Spark's default, 15m"
    assert [stream(maxTriggerDelay=t).max_trigger_delay_ms for t in ("250", "250ms", "2m", "1h", "1d")] == [
        250, 250, 120_000, 3_600_000, 86_400_000]
    assert batch(minOffsetsPerTrigger="100").min_offsets_per_trigger is None, "a batch read takes its range at once"
    assert "minOffsetsPerTrigger (600) is above maxOffsetsPerTrigger (500)" in source_error(
        {"subscribe": "o", "minOffsetsPerTrigger": "600", "maxOffsetsPerTrigger": "500"}, streaming=True)
    assert "maxTriggerDelay must be a time such as '15m'" in source_error(
        {"subscribe": "o", "maxTriggerDelay": "soon"}, streaming=True)
    assert "minOffsetsPerTrigger must be a positive number" in source_error(
        {"subscribe": "o", "minOffsetsPerTrigger": "0"}, streaming=True)


def test_task_splitting_options():
    b = batch(minPartitions="8", maxRecordsPerPartition="1000")
    assert (b.min_partitions, b.max_records_per_partition) == (8, 1000)
    assert "minPartitions must be a positive number of Spark tasks" in source_error(
        {"subscribe": "o", "minPartitions": "-1"})
    assert "maxRecordsPerPartition must be a positive number" in source_error(
        {"subscribe": "o", "maxRecordsPerPartition": "x"})


def test_ending_timestamps_take_sparks_precedence():
    assert batch(endingTimestamp="1000", endingOffsetsByTimestamp='{"orders":{"0":5}}', endingOffsets="latest"
                 ).ending == TimestampSpec(timestamp=1000, ending=True)
    b = batch(endingOffsetsByTimestamp='{"orders":{"0":5}}', endingOffsets="latest")
    assert b.ending == TimestampSpec(timestamps={"orders": {0: 5}}, ending=True)
    assert b.ending.option == "endingOffsetsByTimestamp"
    assert source_error({"subscribe": "o", "endingTimestamp": "1"}, streaming=True).startswith(
        "endingTimestamp is for batch queries")
    assert "endingOffsetsByTimestamp: timestamp -3" in source_error(
        {"subscribe": "o", "endingOffsetsByTimestamp": '{"o":{"0":-3}}'})


def test_the_starting_timestamp_strategy():
    assert batch().timestamp_strategy == "error"
    assert batch(startingOffsetsByTimestampStrategy="LATEST").timestamp_strategy == "latest"
    assert "startingOffsetsByTimestampStrategy must be error" in source_error(
        {"subscribe": "o", "startingOffsetsByTimestampStrategy": "earliest"})


@pytest.mark.parametrize("name", ["groupIdPrefix", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
                                  "fetchOffset.retryIntervalMs"])
def test_kafka_source_options_that_cannot_mean_the_same_here_say_why(name):
    message = source_error({"subscribe": "o", name: "1"})
    assert message.startswith(f"option '{name}' does not apply to lakelog:") and message.endswith("drop it")


def test_the_sinks_acks_follow_kafka():
    assert parse_sink_options({}).acks == "1" and parse_sink_options({}).min_insync_replicas == 1
    assert parse_sink_options({"acks": "all"}).acks == parse_sink_options({"acks": "-1"}).acks == "all"
    assert parse_sink_options({"acks": "1", "minInsyncReplicas": "2"}).min_insync_replicas == 2
    assert sink_error({"acks": "2"}).startswith("acks must be 1 or all (-1)")
    assert "acks=0: a lakelog write always returns once its append is committed" in sink_error({"acks": "0"})
    assert "minInsyncReplicas must be a positive number" in sink_error({"minInsyncReplicas": "0"})


def test_offsets_behind_latest_are_sparks_kafka_source_metrics():
    from pipelines.spark.positions import behind_latest

    latest = {"a": {0: 100, 1: 50}, "b": {0: 10}}
    got = behind_latest(latest, {"a": {0: 40, 1: 50}, "b": {0: 4}})
    assert got == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "60", "avgOffsetsBehindLatest": "22.0"}
    assert behind_latest(latest, {"a": {0: 120}})["maxOffsetsBehindLatest"] == "0", "never negative"
    assert behind_latest(latest, {}) == {} and behind_latest({}, {"a": {0: 1}}) == {}
