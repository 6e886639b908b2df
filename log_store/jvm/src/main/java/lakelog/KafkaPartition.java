package lakelog;

import org.apache.spark.sql.api.java.UDF3;

/**
 * Kafka's default partitioner inside the JVM: {@code toPositive(murmur2(key)) % partitions} for a
 * keyed record, {@code sequence % partitions} for an unkeyed one (lakelog's round-robin by
 * sequence). Registered by lakelog as the SQL function {@code lakelog_partition(key, sequence, n)}
 * so producing does not ship every key to Python and back. Cross-checked against kafka-python.
 */
public final class KafkaPartition implements UDF3<byte[], Long, Integer, Integer> {
    private static final long serialVersionUID = 1L;

    @Override
    public Integer call(byte[] key, Long sequence, Integer partitions) {
        if (partitions == null || partitions < 1) {
            return null;
        }
        if (key == null) {
            return sequence == null ? null : (int) Math.floorMod(sequence, (long) partitions);
        }
        return (murmur2(key) & 0x7fffffff) % partitions;
    }

    /** Kafka's murmur2 (seed 0x9747b28c), as Kafka's clients compute it. */
    static int murmur2(byte[] data) {
        final int length = data.length;
        final int m = 0x5bd1e995;
        final int r = 24;
        int h = 0x9747b28c ^ length;
        final int blocks = length / 4;
        for (int i = 0; i < blocks; i++) {
            final int i4 = i * 4;
            int k = (data[i4] & 0xff) + ((data[i4 + 1] & 0xff) << 8) + ((data[i4 + 2] & 0xff) << 16)
                    + ((data[i4 + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> r;
            k *= m;
            h *= m;
            h ^= k;
        }
        final int tail = length & ~3;
        switch (length % 4) {
            case 3:
                h ^= (data[tail + 2] & 0xff) << 16;
            case 2:
                h ^= (data[tail + 1] & 0xff) << 8;
            case 1:
                h ^= data[tail] & 0xff;
                h *= m;
            default:
                break;
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }
}
