package lakelog.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.execution.streaming.Offset;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.types.StructType;

import scala.Option;

/**
 * A {@code readStream.format("lakelog")} source, as Delta's own streaming source is built: Spark's
 * V1 {@link Source} with admission control ({@code maxOffsetsPerTrigger}), {@code
 * Trigger.AvailableNow} and source metrics. Each micro-batch is planned by lakelog's Python
 * planner, which hands back a DataFrame reading the planned Parquet files with Spark's own
 * reader; it is given to Spark as the batch's rows.
 */
public final class LakelogSource implements Source, SupportsTriggerAvailableNow, ReportsSourceMetrics {
    private final SparkSession session;
    private final PythonSide side;
    private final String id;
    private final StructType schema;
    private final long maxRows;

    LakelogSource(SparkSession session, PythonSide side, String id, StructType schema, long maxRows) {
        this.session = session;
        this.side = side;
        this.id = id;
        this.schema = schema;
        this.maxRows = maxRows;
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Option<Offset> getOffset() {
        throw new UnsupportedOperationException("lakelog's source is asked latestOffset(start, limit)");
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return maxRows > 0 ? ReadLimit.maxRows(maxRows) : ReadLimit.allAvailable();
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset latestOffset(
            org.apache.spark.sql.connector.read.streaming.Offset start, ReadLimit limit) {
        long rows = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : Long.MAX_VALUE;
        String end = side.latestOffset(id, start == null ? null : start.json(), rows);
        return end == null ? null : new LakelogOffset(end);
    }

    @Override
    public Dataset<Row> getBatch(Option<Offset> start, Offset end) {
        Dataset<Row> planned = side.batch(id, start.isDefined() ? start.get().json() : null, end.json());
        return session.internalCreateDataFrame(planned.queryExecution().toRdd(), planned.schema(), true);
    }

    @Override
    public void commit(Offset end) {
        side.commit(id, end.json());
    }

    @Override
    public void commit(org.apache.spark.sql.connector.read.streaming.Offset end) {
        side.commit(id, end.json());
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        side.prepareForTriggerAvailableNow(id);
    }

    @Override
    public Map<String, String> metrics(Optional<org.apache.spark.sql.connector.read.streaming.Offset> consumed) {
        Map<String, String> out = new HashMap<>();
        if (consumed.isEmpty()) {
            return out;
        }
        for (String line : side.metrics(id, consumed.get().json()).split("\n")) {
            int eq = line.indexOf('=');
            if (eq > 0) {
                out.put(line.substring(0, eq), line.substring(eq + 1));
            }
        }
        return out;
    }

    @Override
    public void stop() {
        side.close(id);
    }

    @Override
    public String toString() {
        return "lakelog[" + id + "]";
    }
}
