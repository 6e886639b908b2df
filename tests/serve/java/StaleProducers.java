import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Idempotent Java producers with a custom partitioner, driven line by line on standard input, each
 * answer a JSON line on standard output. Run as a source file:
 * java -cp KAFKA_JARS StaleProducers.java BOOTSTRAP TOPIC
 *
 *   new NAME MAX_AGE_MS [kafka] a producer with metadata.max.age.ms=MAX_AGE_MS, answers its count;
 *                              "kafka": with Kafka's default partitioner instead of LastPartition
 *   count NAME                 the topic's partition count in NAME's metadata, as it stands
 *   send NAME KEY VALUE PART   KEY "-" for none, PART "-" for the partitioner's choice
 *   flush NAME                 every send's outcome (acked: the partition and offset the producer
 *                              was told, -1 when it has none; failed: the exception), then "flushed"
 *   quit
 *
 * The partitioner, {@link LastPartition} unless "kafka" is asked for, sends every record to the last
 * partition its producer knows of, keyed or not.
 */
public class StaleProducers {
    /** Every record to the highest partition number in the producer's metadata. */
    public static class LastPartition implements Partitioner {
        @Override
        public int partition(String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes,
                             Cluster cluster) {
            return cluster.partitionCountForTopic(topic) - 1;
        }

        @Override
        public void configure(Map<String, ?> configs) {}

        @Override
        public void close() {}
    }

    static synchronized void say(String json) {
        System.out.println(json);
    }

    public static void main(String[] args) throws Exception {
        String boot = args[0];
        String topic = args[1];
        Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "new" -> {
                    Properties props = new Properties();
                    props.put("bootstrap.servers", boot);
                    props.put("enable.idempotence", "true");
                    props.put("acks", "all");
                    props.put("linger.ms", "5");
                    props.put("metadata.max.age.ms", w[2]);
                    if (w.length < 4 || !w[3].equals("kafka")) {
                        props.put("partitioner.class", LastPartition.class);
                    }
                    props.put("key.serializer", StringSerializer.class.getName());
                    props.put("value.serializer", StringSerializer.class.getName());
                    KafkaProducer<String, String> p = new KafkaProducer<>(props);
                    producers.put(w[1], p);
                    say("{\"event\":\"count\",\"producer\":\"" + w[1] + "\",\"count\":"
                            + p.partitionsFor(topic).size() + "}");
                }
                case "count" -> say("{\"event\":\"count\",\"producer\":\"" + w[1] + "\",\"count\":"
                        + producers.get(w[1]).partitionsFor(topic).size() + "}");
                case "send" -> {
                    String name = w[1];
                    String key = w[2].equals("-") ? null : w[2];
                    String value = w[3];
                    Integer partition = w[4].equals("-") ? null : Integer.valueOf(w[4]);
                    producers.get(name).send(new ProducerRecord<>(topic, partition, key, value), (md, e) -> {
                        if (e == null) {
                            say("{\"event\":\"acked\",\"producer\":\"" + name + "\",\"value\":\"" + value
                                    + "\",\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
                        } else {
                            say("{\"event\":\"failed\",\"producer\":\"" + name + "\",\"value\":\"" + value
                                    + "\",\"error\":\"" + e.getClass().getName() + ": "
                                    + String.valueOf(e.getMessage()).replace("\"", "'") + "\"}");
                        }
                    });
                }
                case "flush" -> {
                    producers.get(w[1]).flush();
                    say("{\"event\":\"flushed\",\"producer\":\"" + w[1] + "\"}");
                }
                case "quit" -> {
                    for (KafkaProducer<String, String> p : producers.values()) {
                        p.close();
                    }
                    say("{\"event\":\"closed\"}");
                    return;
                }
                default -> say("{\"event\":\"unknown\",\"line\":\"" + line + "\"}");
            }
        }
    }
}
