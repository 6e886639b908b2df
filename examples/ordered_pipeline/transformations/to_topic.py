"""A flow out of the pipeline: each record of the streaming table ``orders`` written to the lakelog
topic ``orders_copy`` (which must exist) through the sink ``orders_copy_topic``, lakelog's Python
data source's stream writer (registered in ``orders.py``). A micro-batch lands in the topic once,
under the flow's producer id, kept in the flow's checkpoint in the spec's storage."""

from pyspark import pipelines as dp

OUT_TOPIC = "orders_copy"

dp.create_sink("orders_copy_topic", format="lakelog", options={"topic": OUT_TOPIC})


@dp.append_flow(target="orders_copy_topic")
def orders_to_topic():
    return spark.readStream.table("orders").select("key", "value")  # noqa: F821 - the pipeline's session
