import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A Kafka consumer with group.protocol=consumer (KIP-848), or the protocol given, polling a topic
 * for up to 30 s: prints the exception its poll raises (class and message), or "no error" and the
 * records it read. Run as a source file:
 * java -cp KAFKA_JARS GroupProtocolConsumer.java BOOTSTRAP TOPIC GROUP [PROTOCOL]
 */
public class GroupProtocolConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.protocol", args.length > 3 ? args[3] : "consumer");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]));
            long end = System.currentTimeMillis() + 30_000;
            int records = 0;
            while (System.currentTimeMillis() < end) {
                records += consumer.poll(Duration.ofMillis(500)).count();
            }
            System.out.println("no error: " + records + " records");
        } catch (Exception e) {
            System.out.println(e.getClass().getName() + ": " + e.getMessage());
        }
    }
}
