package lakelog.spark;

import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.ClassicConversions$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LogicalRDD$;
import org.apache.spark.sql.execution.streaming.Sink;

/**
 * A {@code writeStream.format("lakelog")} sink: each micro-batch's rows, made a plain batch
 * DataFrame as Spark's {@code foreachBatch} makes them, are produced by lakelog's Python
 * producer (one fenced append per topic), with nothing staged.
 */
public final class LakelogSink implements Sink {
    private final SparkSession session;
    private final PythonSide side;
    private final Map<String, String> options;

    LakelogSink(SparkSession session, PythonSide side, Map<String, String> options) {
        this.session = session;
        this.side = side;
        this.options = options;
    }

    @Override
    public void addBatch(long batchId, Dataset<Row> data) {
        org.apache.spark.sql.classic.Dataset<Row> rows = ClassicConversions$.MODULE$.castToImpl(data);
        Dataset<Row> batch = org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session,
            LogicalRDD$.MODULE$.fromDataset(rows.queryExecution().toRdd(), rows, false));
        side.write(options, batch, batchId, "append");
    }

    @Override
    public String toString() {
        return "lakelog sink";
    }
}
