package lakelog.spark;

import java.util.Map;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.PrunedScan;
import org.apache.spark.sql.types.StructType;

/**
 * A {@code read.format("lakelog")}: planned when Spark scans it (each action reads the log as it
 * is then), by lakelog's Python planner, which hands back a DataFrame of the columns Spark asks
 * for; its rows go to Spark as they are (no conversion).
 */
final class LakelogRelation extends BaseRelation implements PrunedScan {
    private final SQLContext context;
    private final PythonSide side;
    private final Map<String, String> options;
    private final StructType schema;

    LakelogRelation(SQLContext context, PythonSide side, Map<String, String> options, StructType schema) {
        this.context = context;
        this.side = side;
        this.options = options;
        this.schema = schema;
    }

    @Override
    public SQLContext sqlContext() {
        return context;
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public boolean needConversion() {
        return false;
    }

    @Override
    @SuppressWarnings("unchecked")
    public RDD<Row> buildScan(String[] columns) {
        return (RDD<Row>) (RDD<?>) side.read(options, columns).queryExecution().toRdd();
    }
}
