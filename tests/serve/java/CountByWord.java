import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams application (at-least-once, or GUARANTEE) that counts the words of INPUT in a state store
 * ("counts", backed by its compacted changelog topic) and writes each new count to OUTPUT, keyed by
 * the word. Re-keying by the word goes through a repartition topic, as a count by any other key than
 * the input's does. Run as a source file:
 * java -cp STREAMS_JARS CountByWord.java BOOTSTRAP APPLICATION_ID STATE_DIR INPUT OUTPUT [GUARANTEE [COMMIT_MS]]
 * GUARANTEE: Kafka Streams' processing.guarantee, at_least_once (the default) or exactly_once_v2
 * (each commit a transaction: OUTPUT's counts, the changelog and the input's positions together);
 * COMMIT_MS: its commit.interval.ms (default 500).
 *
 * Prints {"name":"state","state":S} on standard output at each change of the application's state
 * (RUNNING once its store is restored and it processes), {"name":"tasks","tasks":[...]} at each
 * change of its active tasks while RUNNING ("1_2": the count's task that writes OUTPUT's partition
 * 2), and stops on SIGTERM; exits with 1 on a fatal error (ERROR).
 */
public class CountByWord {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args.length > 5 ? args[5] : StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.length > 6 ? Integer.parseInt(args[6]) : 500);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);  // every count to OUTPUT, none merged
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // a member killed leaves the group after 10 s, not Kafka's 45: a restarted one is assigned sooner
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[3], Consumed.with(Serdes.String(), Serdes.String()))
            .map((user, word) -> KeyValue.pair(word, user))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(args[4], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("{\"name\":\"state\",\"state\":\"" + now + "\"}");
            System.out.flush();
            if (now == KafkaStreams.State.ERROR) {  // a fatal error: exit, its stack trace logged
                new Thread(() -> System.exit(1)).start();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.start();
        Thread tasks = new Thread(() -> {  // polled, not from the state listener: it runs inside a transition
            String told = "";
            while (true) {
                if (streams.state() == KafkaStreams.State.RUNNING) {
                    TreeSet<String> active = new TreeSet<>();
                    for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
                        for (TaskMetadata task : thread.activeTasks()) {
                            active.add("\"" + task.taskId() + "\"");
                        }
                    }
                    String line = "{\"name\":\"tasks\",\"tasks\":[" + String.join(",", active) + "]}";
                    if (!line.equals(told)) {
                        System.out.println(line);
                        System.out.flush();
                        told = line;
                    }
                }
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        tasks.setDaemon(true);
        tasks.start();
        stopped.await();
    }
}
