

def test_a_reader_and_a_stream_writer_sent_to_tasks_carry_no_py4j_secret(lakelog, root, tmp_path):
    import pickle

    from log_store.session import gateway_of
    from pipelines.spark.sink import Committer, StreamWriter

    secret = gateway_of(lakelog).split(":", 1)[1]
    planner = Planner(root, parse_source_options({"subscribe": T}, streaming=True), gateway_of(lakelog))
    assert secret.encode() not in pickle.dumps(planner)
    assert planner.gateway, "the driver side keeps it"
    from pipelines.spark.options import parse_sink_options

    writer = StreamWriter(Committer(gateway_of(lakelog), root, parse_sink_options({"topic": T}), str(tmp_path)), "p")
    assert secret.encode() not in pickle.dumps(writer) and writer.committer.gateway


def test_one_session_is_attached_per_process(lakelog):
    from log_store.session import attach, gateway_of

    assert attach(gateway_of(lakelog)) is attach(gateway_of(lakelog))


def test_a_partition_retired_before_the_stream_began_is_not_its_loss(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 3)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 90, keys=30))
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 2)
    controller.tick(T, delete_delay=0)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 30, keys=30, start=90))
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    assert len(delivered(sink)) == len(log_rows(root, T)), "every record of partitions 0 and 1, no error"


def test_a_topic_deleted_under_a_pattern_follows_fail_on_data_loss(lakelog, root, tmp_path):
    admin = TopicAdmin(lakelog, root)
    for name in ("shop.a", "shop.b"):
        admin.create(name, 1)
        Producer(lakelog, root, name, "p").send(make_records(lakelog, 10, keys=5))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribePattern": r"shop\..*", "startingOffsets": "earliest"}
    stream_to(lakelog, sink, ck, **options)
    TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True)).delete("shop.b")
    Producer(lakelog, root, "shop.a", "p").send(make_records(lakelog, 10, keys=5, start=10))
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert "topic 'shop.b': the topic was deleted" in str(err.value)
    stream_to(lakelog, sink, ck, **options, failOnDataLoss="false")
    assert len(delivered(sink)) == 30
