package lakelog.spark;

import java.util.function.Function;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
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
    private final StructType schema;
    private final Function<String[], Dataset<Row>> scan;

    /** {@code scan}: the read's columns (in Spark's order) to the Python side's planned DataFrame. */
    LakelogRelation(SQLContext context, StructType schema, Function<String[], Dataset<Row>> scan) {
        this.context = context;
        this.schema = schema;
        this.scan = scan;
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
        return (RDD<Row>) (RDD<?>) scan.apply(columns).queryExecution().toRdd();
    }
}
