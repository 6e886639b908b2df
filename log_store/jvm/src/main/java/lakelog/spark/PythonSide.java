package lakelog.spark;

import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * What {@code format("lakelog")} asks of lakelog's Python code in the driver (pipelines.spark.bridge,
 * installed through py4j by {@code pipelines.spark.register}): every rule (options, positions,
 * the resize gates, what was skipped, producing) stays there; this module hands Spark its
 * offsets and the DataFrames the Python side plans. Offsets are lakelog's JSON, opaque here.
 */
public interface PythonSide {
    /** Whether the Python process is there (a dead one makes py4j throw). */
    boolean alive();

    /** A read's options checked (a stream's or a batch's); its schema as Spark's JSON. */
    String readSchema(Map<String, String> options, boolean streaming);

    /** A stream source opened under {@code source}; {@code metadataPath}: its folder in the query's
     * checkpoint (where its first offset is kept). Returns its default record limit per
     * micro-batch ({@code maxOffsetsPerTrigger}), or -1. */
    long open(String source, Map<String, String> options, String metadataPath);

    /** Where the next micro-batch from {@code start} ({@code null}: the stream's first) ends. */
    String latestOffset(String source, String start, long maxRows);

    /** The records between two offsets as a batch DataFrame ({@code start} null: the first). */
    Dataset<Row> batch(String source, String start, String end);

    void commit(String source, String end);

    void prepareForTriggerAvailableNow(String source);

    /** The query progress's source metrics at {@code end} (offsets behind the latest), one
     * {@code key=value} per line. */
    String metrics(String source, String end);

    void close(String source);

    /** A batch read of {@code columns} (in that order) as a DataFrame. */
    Dataset<Row> read(Map<String, String> options, String[] columns);

    /** Produce {@code data} to its topics: a batch write ({@code batchId} -1, Spark's save mode
     * {@code mode}) or a stream's micro-batch. */
    void write(Map<String, String> options, Dataset<Row> data, long batchId, String mode);
}
