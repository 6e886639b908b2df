package lakelog;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.api.java.UDF2;

/**
 * A row's index among the rows of its partition seen so far in this Spark task, for dense
 * offsets without a shuffle: {@code offset = (log end + rows of the partition in earlier tasks)
 * + index}. Returns -1 when a row's sequence is not above the previous one of its partition in
 * the task (input not in sequence order: lakelog then numbers the rows with a sorting window).
 *
 * <p>The count lives in this object: Spark deserializes a stage's functions once per task, so
 * each task counts from 0. lakelog registers it as non-deterministic ({@code
 * lakelog_offset_index(partition, sequence)}) so that Spark evaluates it exactly once per row, in
 * input order, and checks the written files' offset ranges before committing.
 */
public final class OffsetIndex implements UDF2<Integer, Long, Long> {
    private static final long serialVersionUID = 1L;

    private transient Map<Integer, long[]> seen;

    @Override
    public Long call(Integer partition, Long sequence) {
        if (seen == null) {
            seen = new HashMap<>();
        }
        long seq = sequence == null ? Long.MIN_VALUE : sequence;
        long[] state = seen.get(partition);
        if (state == null) {
            seen.put(partition, new long[] {1L, seq});
            return 0L;
        }
        if (seq <= state[1]) {
            return -1L;
        }
        state[1] = seq;
        return state[0]++;
    }
}
