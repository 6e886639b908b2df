"""One local Spark session per test run; a temporary root per test."""

from __future__ import annotations

import os

import pytest

from log_store.config import SparkSettings

# The suite's JVM runs thousands of tiny jobs, each a new query shape, so it spends more time
# compiling (JIT, whole-stage code generation) than running: quick-start settings as in the
# `small` profile, kept at local[2] and 4 GB so member processes attached to it run side by side.
# LAKELOG_TEST_PROFILE=standard runs the suite on the shipped default settings instead.
QUICK_START = {
    "spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1",  # prepended to the quiet logging's options
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.shuffle.partitions": "2",  # still more than one: shuffles keep their ordering hazards
}


def suite_settings() -> SparkSettings:
    if os.environ.get("LAKELOG_TEST_PROFILE", "quick") == "standard":
        return SparkSettings()
    return SparkSettings(conf=QUICK_START)


@pytest.fixture(scope="session")
def spark():
    from chaos.host import GATEWAY_ENV
    from log_store.session import build_session

    session = build_session(suite_settings())
    # Member and worker processes that do not test races across JVMs attach to this JVM
    # (chaos.host.session): 0.4 s to start instead of 15 s.
    params = session.sparkContext._gateway.gateway_parameters
    os.environ[GATEWAY_ENV] = f"{params.port}:{params.auth_token}"
    yield session
    os.environ.pop(GATEWAY_ENV, None)
    session.stop()


@pytest.fixture()
def root(tmp_path) -> str:
    return str(tmp_path / "root")
