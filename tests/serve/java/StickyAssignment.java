import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;

/**
 * Kafka's own sticky assignors run on members' subscriptions as a group's leader gets them: prints,
 * for each group given, one line with each member's assigned partitions ("a=0,2,4 b=1,3"), or the
 * exception the assignor raised. Run as a source file:
 * java -cp KAFKA_JARS StickyAssignment.java ASSIGNOR TOPIC PARTITIONS MEMBER=HEX[,MEMBER=HEX...] ...
 * (ASSIGNOR: cooperative-sticky or sticky; HEX: a subscription as ConsumerProtocol writes it).
 */
public class StickyAssignment {
    public static void main(String[] args) {
        String topic = args[1];
        Node node = new Node(0, "localhost", 9092);
        List<PartitionInfo> partitions = new ArrayList<>();
        for (int p = 0; p < Integer.parseInt(args[2]); p++)
            partitions.add(new PartitionInfo(topic, p, node, new Node[]{node}, new Node[]{node}));
        Cluster cluster = new Cluster("lakelog", List.of(node), partitions, Set.of(), Set.of());
        for (int i = 3; i < args.length; i++) {
            ConsumerPartitionAssignor assignor = args[0].equals("sticky") ? new StickyAssignor() : new CooperativeStickyAssignor();
            Map<String, Subscription> members = new HashMap<>();
            for (String member : args[i].split(",")) {
                String[] named = member.split("=");
                members.put(named[0], ConsumerProtocol.deserializeSubscription(ByteBuffer.wrap(HexFormat.of().parseHex(named[1]))));
            }
            try {
                Map<String, String> out = new TreeMap<>();
                assignor.assign(cluster, new GroupSubscription(members)).groupAssignment().forEach((m, a) ->
                    out.put(m, m + "=" + String.join(",", a.partitions().stream().map(tp -> tp.partition()).sorted()
                        .map(String::valueOf).toList())));
                System.out.println(String.join(" ", out.values()));
            } catch (RuntimeException e) {
                System.out.println(e.getClass().getName() + ": " + e.getMessage());
            }
        }
    }
}
