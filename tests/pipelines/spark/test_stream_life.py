

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
