"""What a Spark Declarative Pipeline's definition file calls to use lakelog's topics (``register``):
``spark-pipelines`` runs a pipeline through Spark Connect, where ``format("lakelog")`` is lakelog's
Python data source (``python_source``).

PySpark 4.2's ``spark-pipelines`` stops with ``UNKNOWN_RESPONSE`` after a run that used a Python
data source: the server sends the Python workers' (empty) profiler accumulators as observed
metrics on the run's event stream, and the client's command iterator refuses anything that is not
a result (Spark's fix, SPARK-59135, skips such metrics). ``register`` makes the client skip them too."""

from __future__ import annotations

from pipelines.spark import python_source

ROOT_CONF = "lakelog.root"  # the session's default root, as the pipeline spec's ``configuration`` gives it


def register(spark, root: str | None = None) -> bool:
    """``format("lakelog")`` in the pipeline's session ``spark`` (the ``spark`` of a definition
    file), its default root ``root``, else the spec's ``lakelog.root``, else ``$LAKELOG_ROOT``;
    and the pipeline's event stream read past metrics. True if the Python source was registered."""
    accept_metrics_in_command_streams()
    return python_source.register(spark, root or spark.conf.get(ROOT_CONF, None))


def accept_metrics_in_command_streams() -> None:
    """Make the Connect client's command iterator skip the metrics a command's response stream
    may carry (PySpark 4.2 raises ``UNKNOWN_RESPONSE`` on them); any other response still fails."""
    from pyspark.errors import PySparkValueError
    from pyspark.sql.connect.client.core import PlanObservedMetrics, SparkConnectClient
    from pyspark.sql.metrics import PlanMetrics

    if getattr(SparkConnectClient.execute_command_as_iterator, "_lakelog", False):
        return

    def execute_command_as_iterator(self, command, observations=None):
        req = self._execute_plan_request_with_metadata()
        if self._user_id:
            req.user_context.user_id = self._user_id
        self._set_command_in_plan(req.plan, command)
        for response in self._execute_and_fetch_as_iterator(req, observations or {}):
            if isinstance(response, dict):
                yield response
            elif not isinstance(response, (PlanMetrics, PlanObservedMetrics)):
                raise PySparkValueError(errorClass="UNKNOWN_RESPONSE", messageParameters={"response": str(response)})

    execute_command_as_iterator._lakelog = True
    SparkConnectClient.execute_command_as_iterator = execute_command_as_iterator
