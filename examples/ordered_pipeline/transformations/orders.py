"""The pipeline's datasets: ``orders``, a streaming table fed by the lakelog topic ``orders``
(every record once, each key in order across resizes: the stream stops at the resize gates), and
``orders_per_key``, a materialized view over it.

``spark`` is the pipeline's Spark Connect session: ``format("lakelog")`` there is lakelog's Python
data source, registered on it here (``declarative.register``) with the spec's ``lakelog.root``."""

from pyspark import pipelines as dp
from pyspark.sql import functions as F

from pipelines.spark import declarative

SOURCE_TOPIC = "orders"

declarative.register(spark)  # noqa: F821 - the pipeline's session, which spark-pipelines gives each definition file


@dp.table(comment="Each record of the topic once, as the stream delivered it.")
def orders():
    return (spark.readStream.format("lakelog")  # noqa: F821
            .option("subscribe", SOURCE_TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
                    "partition", "offset", "timestamp", "leader_epoch"))


@dp.materialized_view(comment="Records per key, with the first and last record's time.")
def orders_per_key():
    return (spark.read.table("orders")  # noqa: F821
            .groupBy("key")
            .agg(F.count("*").alias("records"), F.min("timestamp").alias("first"), F.max("timestamp").alias("last")))
