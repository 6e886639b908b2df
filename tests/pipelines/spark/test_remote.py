"""``format("lakelog")`` reads of a root in an object store: the S3 emulator (tests/s3_emulator.py).

A root is built locally with Spark (a topic grown from 3 to 4 partitions, so its log has records
of two leader epochs), its log locations rewritten to the bucket's URI (the control plane records
them absolute), and the tree uploaded. Reads then go through delta-rs on the driver and in the
tasks, with the credentials as ``storage.*`` options or in the Python workers' environment.
The emulator runs in its own process: delta-rs holds the GIL during some requests, so a server
in a thread of the reading process would stall them. ``make test-s3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from control_plane.controller import TopicController
from control_plane.layout import RootLayout
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from tests.pipelines.spark.test_source import cross_partition_batches, order_violations, sink_batches, stream_to
from tests.s3_emulator import free_port
from tests.support import log_rows, make_records

pytestmark = pytest.mark.s3

T = "orders.v1"
BUCKET = "lakelog-test"
COPIED = "copied"  # the same root uploaded with its local log locations left as they were


@dataclass(frozen=True)
class RemoteRoot:
    endpoint: str
    expected: list[dict]  # the topic's log as delta-rs read it locally before the upload

    @property
    def credentials(self) -> dict[str, str]:
        """The store's settings as delta-rs takes them (environment variable names)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

    def uri(self, scheme: str = "s3", prefix: str = "root") -> str:
        return f"{scheme}://{BUCKET}/{prefix}"

    def options(self, scheme: str = "s3", **extra) -> dict[str, str]:
        """A read's options: the root and the credentials as storage.* options."""
        return {"root": self.uri(scheme), **{f"storage.{k}": v for k, v in self.credentials.items()}, **extra}


@pytest.fixture(scope="module")
def s3_endpoint(s3):
    return s3.endpoint


def upload(client, local: Path, prefix: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(local).as_posix()}")


@pytest.fixture(scope="module")
def remote(spark, s3_endpoint, tmp_path_factory) -> RemoteRoot:
    import boto3

    local = tmp_path_factory.mktemp("remote") / "root"
    TopicAdmin(spark, str(local)).create(T, 3)
    producer = Producer(spark, str(local), T, "p")
    producer.send(make_records(spark, 240, keys=12))
    TopicController(spark, str(local), ControllerSettings()).alter(T, 4)
    producer.send(make_records(spark, 120, keys=40, start=240))
    expected = log_rows(str(local), T)
    assert len({r["leader_epoch"] for r in expected}) == 2, "records of two epochs"
    assert {r["partition"] for r in expected} == {0, 1, 2, 3}

    root = RemoteRoot(s3_endpoint, expected)
    client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    upload(client, local, COPIED)
    # As a root made on S3 through Spark records it: the log's location under the bucket (s3a).
    topics = RootLayout(str(local)).control("topics")
    spark.sql(f"UPDATE delta.`{topics}` SET location = concat('{root.uri('s3a')}', "
              f"substring(location, {len(str(local)) + 1}))")
    upload(client, local, "root")
    return root


def load(spark, options: dict[str, str]):
    reader = spark.read.format("lakelog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def as_records(rows) -> list[tuple]:
    return [(r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]), r["leader_epoch"]) for r in rows]


@pytest.fixture()
def registered(spark):
    from pipelines.spark import register

    register(spark)
    return spark


def test_the_uploaded_root_records_its_log_in_the_bucket(remote):
    """The copy is a root of its own: its control plane names the log under the bucket."""
    from control_plane.fast_reads import FastTopicReader

    image = FastTopicReader(remote.uri(), remote.credentials).images()[T]
    assert image.latest.location == f"{remote.uri('s3a')}/topics/{T}"


def test_a_batch_read_of_an_s3_root_gives_every_record_in_offset_order(registered, remote):
    rows = load(registered, remote.options(subscribe=T)).collect()
    got = as_records(rows)
    assert sorted(got) == sorted(as_records(remote.expected)) and len(got) == 360
    for p in range(4):
        offsets = [o for q, o, *_ in got if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: dense, in offset order"
    assert {r["topic"] for r in rows} == {T}
    since_epoch = load(registered, remote.options(subscribe=T, startingTimestamp="0"))
    assert since_epoch.count() == 360, "a start by time finds offsets with delta-rs on the driver"


def test_an_available_now_stream_from_an_s3a_root_lands_every_record_in_a_local_delta_sink(
        registered, remote, tmp_path):
    sink = str(tmp_path / "sink")
    stream_to(registered, sink, str(tmp_path / "ck"),
              **remote.options("s3a", subscribe=T, startingOffsets="earliest", maxOffsetsPerTrigger="100"))
    batches = sink_batches(sink)
    assert sorted(int(r["value"]) for _v, rows in batches for r in rows) == list(range(360)), "every record once"
    assert len(batches) >= 4
    assert order_violations(batches) == [] and cross_partition_batches(batches) == []


def test_credentials_in_the_python_workers_environment(registered, remote):
    """Without storage options delta-rs takes the credentials from the environment of Spark's
    Python workers (on a cluster: spark.executorEnv.* or the machines' own); the environment
    Spark gives them comes from the context's when the source is registered."""
    from pipelines.spark import register

    environment = registered.sparkContext.environment
    saved = dict(environment)
    try:
        environment.update(remote.credentials)
        register(registered)
        assert load(registered, {"root": remote.uri(), "subscribe": T}).count() == 360
    finally:
        environment.clear()
        environment.update(saved)
        register(registered)


def test_the_planner_and_a_task_read_with_credentials_from_the_environment(remote, monkeypatch):
    """The same, without Spark: nothing but the process's environment names the store."""
    from pipelines.spark.options import parse_source_options
    from pipelines.spark.planner import Planner
    from pipelines.spark.source import read_range

    for k, v in remote.credentials.items():
        monkeypatch.setenv(k, v)
    planner = Planner(remote.uri(), parse_source_options({"subscribe": T}, streaming=False))
    now, = planner.topics().values()
    snap, topic_id = now.snap, now.topic_id
    ends = {p: sum(1 for r in remote.expected if r["partition"] == p) for p in range(4)}
    assert snap.log_ends == ends
    from pipelines.spark.offsets import StreamOffset, TopicOffset

    tasks = planner.ranges(StreamOffset(), StreamOffset({T: TopicOffset(topic_id, None, ends)}))
    got = [r for part in tasks for b in read_range(part, False) for r in b.to_pylist()]
    assert sorted(as_records(got)) == sorted(as_records(remote.expected))


def test_a_wrong_endpoint_or_bucket_fails_with_a_clear_error(registered, remote):
    closed = f"http://127.0.0.1:{free_port()}"
    wrong_endpoint = remote.options(subscribe=T, **{"storage.AWS_ENDPOINT_URL": closed, "storage.max_retries": "1",
                                                    "storage.retry_timeout": "2s"})
    with pytest.raises(Exception) as err:
        load(registered, wrong_endpoint)
    message = str(err.value)
    assert f"cannot read the Delta table at {remote.uri()}/control/topics with delta-rs" in message
    assert "Connection refused" in message and "endpoint" in message
    no_bucket = {**remote.options(subscribe=T), "root": "s3://no-such-bucket/root"}
    with pytest.raises(Exception) as err:
        load(registered, no_bucket)
    assert "cannot read the Delta table at s3://no-such-bucket/root/control/topics" in str(err.value)
    assert "do not exist" not in str(err.value), "not taken for a root without topics"


def test_a_root_copied_with_local_log_locations_is_refused(registered, remote):
    with pytest.raises(Exception) as err:
        load(registered, {**remote.options(subscribe=T), "root": remote.uri(prefix=COPIED)})
    assert "records its log at the local path" in str(err.value)


@pytest.mark.parametrize("root, message", [
    ("dbfs:/lakelog", "cannot open Databricks' dbfs:/ paths"),
    ("wasbs://c@a.blob.core.windows.net/lakelog", "does not open wasbs://"),
])
def test_roots_delta_rs_cannot_open_are_refused_with_what_to_do(registered, root, message):
    with pytest.raises(Exception) as err:
        load(registered, {"root": root, "subscribe": T})
    assert message in str(err.value) and "give" in str(err.value)


def test_writes_to_a_remote_root_other_than_s3_are_refused_with_what_to_do(registered):
    df = make_records(registered, 3)
    with pytest.raises(Exception) as err:
        (df.write.format("lakelog").option("root", "abfss://c@a.dfs.core.windows.net/lakelog").option("topic", T)
         .mode("append").save())
    assert "writes to local and S3 roots" in str(err.value) and "Producer" in str(err.value)
