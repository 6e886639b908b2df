import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Transactional Java producers, driven line by line on standard input, each answer a JSON line on
 * standard output. Run as a source file: java -cp KAFKA_JARS TxnProducers.java BOOTSTRAP
 *
 *   new NAME TRANSACTIONAL_ID       a producer, its transactions initialised: "ready"
 *   begin NAME                      begins a transaction: "done"
 *   send NAME TOPIC PART VALUE      sends one record and waits for its answer: "done"
 *   commit NAME / abort NAME        ends the transaction: "done"
 *   quit                            "closed"
 *
 * "done" says ok true, or ok false with the exception's class (and its cause's) and message.
 */
public class TxnProducers {
    static void say(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String quoted(String s) {
        return "\"" + String.valueOf(s).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String boot = args[0];
        Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("quit")) {
                break;
            }
            if (w[0].equals("new")) {
                Properties props = new Properties();
                props.put("bootstrap.servers", boot);
                props.put("transactional.id", w[2]);
                props.put("key.serializer", StringSerializer.class.getName());
                props.put("value.serializer", StringSerializer.class.getName());
                props.put("linger.ms", "5");
                props.put("max.block.ms", "60000");
                KafkaProducer<String, String> p = new KafkaProducer<>(props);
                p.initTransactions();
                producers.put(w[1], p);
                say("{\"event\": \"ready\", \"name\": " + quoted(w[1]) + "}");
                continue;
            }
            KafkaProducer<String, String> p = producers.get(w[1]);
            try {
                switch (w[0]) {
                    case "begin" -> p.beginTransaction();
                    case "send" -> p.send(new ProducerRecord<>(w[2], Integer.parseInt(w[3]), null, w[4])).get();
                    case "commit" -> p.commitTransaction();
                    case "abort" -> p.abortTransaction();
                    default -> throw new IllegalArgumentException("unknown command " + w[0]);
                }
                say("{\"event\": \"done\", \"ok\": true}");
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                say("{\"event\": \"done\", \"ok\": false, \"error\": " + quoted(e.getClass().getSimpleName())
                    + ", \"cause\": " + quoted(cause.getClass().getSimpleName()) + ", \"message\": "
                    + quoted(e.getMessage()) + "}");
            }
        }
        for (KafkaProducer<String, String> p : producers.values()) {
            p.close(java.time.Duration.ofSeconds(5));
        }
        say("{\"event\": \"closed\"}");
    }
}
