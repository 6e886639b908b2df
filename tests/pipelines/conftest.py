"""Fixtures of the pipelines' tests."""

import pytest


@pytest.fixture()
def lakelog(spark, root):
    """``spark`` with format("lakelog") registered on ``root``."""
    from pipelines.spark import register

    register(spark, root)
    return spark
