"""``format("lakelog")``: lakelog's topics as a Spark data source, for ``spark.read``,
``spark.readStream``, ``df.write`` and ``df.writeStream``, with Spark's Kafka source's options
and columns.

- ``source``: the data source (``register``), the executors' reads;
- ``planner``: what a read covers and where a micro-batch ends (the resize gates), on the driver;
- ``offsets``: a stream's offset, typed, with its one JSON form;
- ``options``, ``specs``, ``positions``: the options and their offset JSON parsed, and the
  positions they name (pure);
- ``sink``: writes, through the fenced, idempotent producer.
"""

from pipelines.spark.source import FORMAT, register

__all__ = ["FORMAT", "register"]
