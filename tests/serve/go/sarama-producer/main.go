// sarama-producer: an IBM/sarama AsyncProducer driven line by line on standard input, each
// answer a JSON line on standard output (tests/serve/test_acknowledgements.py).
//
//	sarama-producer -bootstrap HOST:PORT -topic TOPIC [-max-messages N] [-refresh DURATION] [-idempotent]
//
//	send KEY VALUE   KEY "-" for none; the partition is sarama's default hash partitioner's (FNV-1a)
//	flush            every send's outcome (acked: the partition and offset sarama reports; failed:
//	                 the error), then "flushed"
//	count            the topic's partition count in the producer's metadata
//	quit
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

var out = json.NewEncoder(os.Stdout)
var mu sync.Mutex

func say(v map[string]any) {
	mu.Lock()
	defer mu.Unlock()
	out.Encode(v)
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "HOST:PORT")
	topic := flag.String("topic", "", "the topic produced to")
	maxMessages := flag.Int("max-messages", 0, "Producer.Flush.MaxMessages (0: sarama's default, no limit)")
	refresh := flag.Duration("refresh", 10*time.Minute, "Metadata.RefreshFrequency")
	idempotent := flag.Bool("idempotent", false, "Producer.Idempotent (acks=all, one request in flight)")
	flag.Parse()

	config := sarama.NewConfig()
	config.ClientID = "sarama-producer"
	config.Version = sarama.V2_1_0_0
	config.Producer.Return.Successes = true
	config.Producer.Return.Errors = true
	config.Producer.Flush.MaxMessages = *maxMessages
	config.Metadata.RefreshFrequency = *refresh
	if *idempotent {
		config.Producer.Idempotent = true
		config.Producer.RequiredAcks = sarama.WaitForAll
		config.Net.MaxOpenRequests = 1
	}
	client, err := sarama.NewClient([]string{*bootstrap}, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
	var pending sync.WaitGroup
	go func() {
		for m := range producer.Successes() {
			say(map[string]any{"event": "acked", "value": m.Metadata, "partition": m.Partition, "offset": m.Offset})
			pending.Done()
		}
	}()
	go func() {
		for e := range producer.Errors() {
			say(map[string]any{"event": "failed", "value": e.Msg.Metadata, "error": e.Err.Error()})
			pending.Done()
		}
	}()

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		w := strings.Fields(in.Text())
		if len(w) == 0 {
			continue
		}
		switch w[0] {
		case "send":
			msg := &sarama.ProducerMessage{Topic: *topic, Value: sarama.StringEncoder(w[2]), Metadata: w[2]}
			if w[1] != "-" {
				msg.Key = sarama.StringEncoder(w[1])
			}
			pending.Add(1)
			producer.Input() <- msg
		case "flush":
			pending.Wait()
			say(map[string]any{"event": "flushed"})
		case "count":
			partitions, err := client.Partitions(*topic)
			if err != nil {
				say(map[string]any{"event": "count", "error": err.Error()})
			} else {
				say(map[string]any{"event": "count", "count": len(partitions)})
			}
		case "quit":
			producer.Close()
			client.Close()
			say(map[string]any{"event": "closed"})
			return
		default:
			say(map[string]any{"event": "unknown", "line": in.Text()})
		}
	}
}
