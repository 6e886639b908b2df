"""How lakelog reaches Delta's JVM classes through py4j, looked up once per Spark session: which
internal package they live in (``org.apache.spark.sql.delta`` in open-source Delta, another on
Databricks: ``spark.delta_internals`` in the configuration; docs/engine.md says what was verified
where), classes and static methods by dotted name, JVM objects as Python values."""

from __future__ import annotations

import json
from typing import Any, Callable

from pyspark.sql import SparkSession

# Where Delta's internal classes live, by the ``spark.delta_internals`` setting.
DELTA_PACKAGES = {"oss": "org.apache.spark.sql.delta", "databricks": "com.databricks.sql.transaction.tahoe"}
INTERNALS_CONF = "spark.lakelog.deltaInternals"


_PER_SESSION: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(session), key) -> (its JVM session, value)


def per_session(spark: SparkSession, key: str, make: Callable[[], Any]) -> Any:
    """``make()``, made once per session under ``key``. Keyed by the session's id, checked against
    its JVM session: a new session that reuses a dead one's id makes its own."""
    try:
        jsession = spark._jsparkSession
    except AttributeError as exc:  # Spark Connect: PySpark's JVM_ATTRIBUTE_NOT_SUPPORTED
        from log_store.errors import SetupError

        raise SetupError(
            "this needs Delta's engine in the Spark driver's JVM (a table on an object store other than S3, a table "
            "whose rules only Delta's writer keeps, or reading a remote table's log), which a Spark Connect session "
            "does not reach: run it with a classic Spark session (docs/engine.md#spark-connect)") from exc
    hit = _PER_SESSION.get((id(spark), key))
    if hit is None or hit[0] is not jsession:
        hit = (jsession, make())
        _PER_SESSION[(id(spark), key)] = hit
    return hit[1]


def forget_session(spark: SparkSession) -> None:
    """Drop what ``per_session`` made for ``spark`` (a setting it depends on changed)."""
    for key in [k for k in _PER_SESSION if k[0] == id(spark)]:
        _PER_SESSION.pop(key, None)


def delta(spark: SparkSession) -> Any:
    """Delta's internal package on the JVM (a py4j package object), looked up once per session: the
    setting is fixed when the session is built, and reading it costs a call into the JVM (about 5 ms;
    a commit looked it up about twenty times)."""
    return per_session(spark, "", lambda: getattr(
        spark._jvm, DELTA_PACKAGES.get(spark.conf.get(INTERNALS_CONF, "oss"), DELTA_PACKAGES["oss"])))


def jvm(spark: SparkSession, name: str) -> Any:
    """A JVM class, static method or (``name()``) the object a static method returns, by its dotted
    name (``delta.`` for Delta's package), looked up once per session: each step of a py4j lookup is a
    call into the JVM, and a step naming a package makes the JVM search every jar for a class of that
    name (a commit made about thirty such steps)."""
    def look_up() -> Any:
        first, _, rest = name.removesuffix("()").partition(".")
        found = delta(spark) if first == "delta" else getattr(spark._jvm, first)
        for step in rest.split(".") if rest else []:
            found = getattr(found, step)
        return found() if name.endswith("()") else found
    return per_session(spark, name, look_up)


def jvm_json(spark: SparkSession, obj: Any) -> Any:
    """A JVM object (a Scala map, a checksum, ...) as Python values, through Delta's own JSON
    mapper: one call across py4j. Iterating a JVM map through py4j ends each loop with a Java
    exception that pyspark converts, about 25 ms a map."""
    return json.loads(jvm(spark, "delta.util.JsonUtils.mapper()").writeValueAsString(obj))
