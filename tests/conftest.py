"""One local Spark session per test run; a temporary root per test."""

from __future__ import annotations

import os

import pytest

from log_store.config import SparkSettings

CONNECT_ENV = "SPARK_CONNECT_MODE_ENABLED"  # PySpark's sign that this process's functions build Connect columns


# Variants of parametrized tests kept for the long suite (make test-long, which CI runs): a
# sibling variant runs the same code in the default suite's time (docs/testing.md).
LONG_VARIANTS = {
    "tests/jobs/test_connect_session.py::test_topic_produce_resize_consume_audit[classic]",
    "tests/pipelines/test_producer.py::test_headers_land_as_given_whichever_path_writes_them[classic-all null]",
    "tests/pipelines/test_producer.py::test_headers_land_as_given_whichever_path_writes_them[connect-some null]",
}


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in LONG_VARIANTS:
            item.add_marker(pytest.mark.long)


@pytest.fixture(scope="session")
def spark():
    from chaos.host import GATEWAY_ENV
    from log_store.session import build_session

    session = build_session(SparkSettings())
    # Member and worker processes that do not test races across JVMs attach to this JVM
    # (chaos.host.session): 0.4 s to start instead of 15 s.
    params = session.sparkContext._gateway.gateway_parameters
    os.environ[GATEWAY_ENV] = f"{params.port}:{params.auth_token}"
    # This process serves format("lakelog") for its JVM, for processes attached to it too (py4j
    # calls back one Python process per JVM).
    from pipelines.spark import register

    register(session)
    yield session
    os.environ.pop(GATEWAY_ENV, None)
    session.stop()


@pytest.fixture()
def root(tmp_path) -> str:
    return str(tmp_path / "root")


@pytest.fixture(scope="session")
def s3():
    """An S3 API on 127.0.0.1 (tests/s3_emulator.py) for the tests of roots on S3."""
    from tests.s3_emulator import S3Emulator

    with S3Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def connect_server():
    """A local Spark Connect server (log_store/connect_server.py), started once, when first asked for."""
    from log_store.connect_server import ConnectServer

    with ConnectServer() as server:
        yield server


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect session on ``connect_server``, built as lakelog builds one (``spark.remote``)."""
    from log_store.session import build_session, is_connect

    had = CONNECT_ENV in os.environ
    session = build_session(SparkSettings(remote=connect_server.url))
    assert is_connect(session)
    if not had:  # only while a test uses it (``session_of_kind``): the classic session's columns stay classic
        os.environ.pop(CONNECT_ENV, None)
    yield session
    session.stop()


@pytest.fixture(params=["classic", "connect"])
def session_of_kind(request):
    """The test run's classic session, or the Connect one (with PySpark's process-wide sign of
    Connect set while the test runs: its functions then build Connect columns)."""
    if request.param == "classic":
        yield request.getfixturevalue("spark")
        return
    from pyspark import SparkContext

    session = request.getfixturevalue("connect_spark")
    classic_before = SparkContext._active_spark_context is not None
    os.environ[CONNECT_ENV] = "1"
    try:
        yield session
    finally:
        os.environ.pop(CONNECT_ENV, None)
    # nothing of the test fell back to a session of this process's own (a JVM started here)
    assert classic_before or SparkContext._active_spark_context is None, "a classic SparkContext was started"
