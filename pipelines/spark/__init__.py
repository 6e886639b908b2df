"""``format("lakelog")``: lakelog's topics as a Spark data source, for ``spark.read``,
``spark.readStream``, ``df.write`` and ``df.writeStream``, with Spark's Kafka source's options
and columns. Spark calls lakelog's JVM source and sink (``log_store/jvm``, ``lakelog.spark``),
which call back into the driver's Python process:

- ``bridge``: ``register``, and the Python side the JVM calls;
- ``planner``: what a read covers and where a micro-batch ends (the resize gates);
- ``reading``: a planned read's rows (Spark's Parquet reader over the planned files);
- ``offsets``: a stream's offset, typed, with its one JSON form;
- ``options``, ``specs``, ``positions``, ``tasks``: the options and their offset JSON parsed,
  the positions they name, the tasks a read is cut into (pure);
- ``sink``: writes, through the fenced, idempotent producer;
- ``python_source``: reads and writes on Spark's Python data source API, for Spark Connect sessions
  (no py4j gateway, no jar), driving the same planner.
"""

__all__ = ["FORMAT", "register"]


def __getattr__(name: str):
    """``FORMAT`` and ``register`` of ``bridge``, imported when first asked for: the Python data
    source's processes (Spark starts one for each stream's reader) do without the JVM source's side."""
    if name in __all__:
        from pipelines.spark import bridge

        return getattr(bridge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
