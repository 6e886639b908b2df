"""A flow out of the pipeline: each record of the lakelog topic ``orders`` written to the topic
``orders_copy`` (which must exist: ``lakelog topics create --topic orders_copy``) through the sink
``orders_copy_topic``, lakelog's Python data source's stream writer.

The flow reads the topic itself, not the streaming table ``orders``: a micro-batch of
``format("lakelog")`` holds a key's records in one partition, in offset order, in its tasks'
order (the resize gates end it at a resize), and the writer appends them in that order, so each
key keeps its order in the copy. A micro-batch that read the streaming table back over several of
its versions would hand the writer its files in Spark's split order instead. A micro-batch lands
once, under the flow's producer id, kept in its checkpoint in the spec's storage."""

from pyspark import pipelines as dp

from pipelines.spark import declarative

SOURCE_TOPIC = "orders"
COPY_TOPIC = "orders_copy"

declarative.register(spark)  # noqa: F821 - the pipeline's session, which spark-pipelines gives each definition file

dp.create_sink("orders_copy_topic", format="lakelog", options={"topic": COPY_TOPIC})


@dp.append_flow(target="orders_copy_topic")
def orders_to_topic():
    return (spark.readStream.format("lakelog")  # noqa: F821
            .option("subscribe", SOURCE_TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value"))
