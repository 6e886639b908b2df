# The README's two commands: `make demo` and `make test`. Each does its own set-up.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
JARS    := .jars/.resolved
JVMJAR  := .jars/lakelog-jvm.jar

.PHONY: setup demo test test-long test-slow test-s3 test-kafka-clients chaos bench bench-groups bench-gating bench-controller bench-partitioner bench-reads bench-spark bench-soak bench-control bench-commit bench-rs-commit bench-commit-growth bench-replication bench-compaction bench-serve bench-txn bench-cli bench-realtime bench-all clean check-tools

check-tools:
	@command -v java >/dev/null || { echo "error: Java 17 is missing: apt-get install openjdk-17-jre-headless"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: Maven is missing (needed to fetch Delta's jars and build lakelog's own): apt-get install maven"; exit 1; }
	@command -v $(PY) >/dev/null || command -v python3 >/dev/null || { echo "error: Python 3.11 is missing"; exit 1; }

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null && $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[local]'
	touch $(STAMP)

$(JARS): conf/delta-jars.pom.xml
	rm -rf .jars
	mvn -q -f conf/delta-jars.pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/.jars \
	    -DexcludeGroupIds=io.netty,org.apache.httpcomponents,commons-codec,commons-logging,org.slf4j
	touch $(JARS)

# lakelog's jar (log_store/jvm), built from source: Kafka's partitioner and the offset counter as Spark SQL
# functions, format("lakelog")'s JVM source and sink, the log store of Delta's engine (docs/engine.md).
$(JVMJAR): $(JARS) log_store/jvm/pom.xml $(shell find log_store/jvm/src -name "*.java")
	mvn -q -f log_store/jvm/pom.xml package -DskipTests
	cp log_store/jvm/target/lakelog-jvm.jar $(JVMJAR)

setup: check-tools $(STAMP) $(JARS) $(JVMJAR)

# REMOTE=1: through a local Spark Connect server started for it (log_store/connect_server.py) and
# stopped after; REMOTE=sc://host:port: through that server.
demo: setup
ifeq ($(REMOTE),)
	$(BIN)/lakelog demo
else ifeq ($(REMOTE),1)
	$(BIN)/python -m log_store.connect_server run $(BIN)/lakelog demo
else
	$(BIN)/lakelog --remote $(REMOTE) demo
endif

test: setup
	$(BIN)/pytest -q

# Long attacks kept out of the default suite for its time (CI runs them after make test). Those
# through Kafka's own clients run with make test-kafka-clients.
test-long: setup
	$(BIN)/pytest -q -m 'long and not kafka_clients'

test-slow: setup
	$(BIN)/pytest -q -m slow

# Roots on S3 against a local S3 emulator the tests start (S3A's jars come with make setup).
test-s3: setup
	$(BIN)/pytest -q -m 's3 and not slow'

# Kafka's own clients against lakelog serve (Kafka's jars from Maven Central into .jars-kafka/,
# Kafka Connect's and Kafka Streams' into .jars-connect/ and .jars-streams/, Go clients built into
# .go-clients/, on first use; docs/testing.md).
test-kafka-clients: setup
	$(BIN)/python -c "from benchmarks.kafka_broker import jars; jars()"
	$(BIN)/python -c "from tests.serve.kafka_apps import connect_jars, streams_jars; connect_jars(); streams_jars()"
	$(BIN)/python -c "from tests.serve.go_clients import go_client; go_client('sarama-producer')"
	$(BIN)/pytest -q -m kafka_clients

# The fault campaign: SCHEDULES seeds from SEED (or SEEDS=3,7,10-12); see RELIABILITY.md.
SCHEDULES ?= 100
SEED ?= 1
chaos: setup
	$(BIN)/python -m chaos --schedules $(SCHEDULES) --seed-start $(SEED) $(if $(SEEDS),--seeds $(SEEDS)) $(CHAOS_ARGS)

bench: setup
	$(BIN)/python benchmarks/produce_consume.py $(BENCH_ARGS)

bench-groups: setup
	$(BIN)/python benchmarks/rebalance.py

bench-gating: setup
	$(BIN)/python benchmarks/gating.py

bench-partitioner: setup
	$(BIN)/python benchmarks/partitioner.py

bench-reads: setup
	$(BIN)/python benchmarks/read_commands.py

bench-spark: setup
	$(BIN)/python benchmarks/spark_format.py $(BENCH_ARGS)

bench-soak: setup
	$(BIN)/python benchmarks/soak.py $(BENCH_ARGS)

bench-controller: setup
	$(BIN)/python benchmarks/controller.py

bench-control: setup
	$(BIN)/python benchmarks/control_writes.py

bench-commit: setup
	$(BIN)/python benchmarks/commit_store.py $(BENCH_ARGS)

# A fenced commit through delta-rs (log_store/rs_engine.py) beside delta-rs's plain append; no JVM.
bench-rs-commit: setup
	$(BIN)/python benchmarks/rs_commit.py $(BENCH_ARGS)

bench-commit-growth: setup
	$(BIN)/python benchmarks/commit_growth.py $(BENCH_ARGS)

bench-replication: setup
	$(BIN)/python benchmarks/replication.py $(BENCH_ARGS)

# A compacted topic of 1M records (10k keys, 8 partitions): key compaction and the latest state per
# key before and after it, beside raw Delta doing the same (a few minutes; BENCH_ARGS=--quick: 100k).
bench-compaction: setup
	$(BIN)/python benchmarks/key_compaction.py $(BENCH_ARGS)

# lakelog serve beside a Kafka 4.4 broker, with Kafka's own performance tools (about 15 minutes).
bench-serve: setup
	$(BIN)/python benchmarks/serve.py $(BENCH_ARGS)

# Transactions through lakelog serve beside a Kafka 4.4 broker: ProducerPerformance with
# --transactional-id, and read_committed end-to-end latency (about 8 minutes on 2 busy cores;
# BENCH_ARGS=--cases=growth: the coordinator's steps alone as its transactions table grows).
bench-txn: setup
	$(BIN)/python benchmarks/transactions.py $(BENCH_ARGS)

# Small commands as a user types them (a new process each), beside a raw delta-rs append.
bench-cli: setup
	$(BIN)/python benchmarks/cli_commands.py $(BENCH_ARGS)

# Spark's real-time mode with Kafka at both ends, through lakelog serve and a Kafka broker.
bench-realtime: setup
	$(BIN)/python benchmarks/spark_realtime.py $(BENCH_ARGS)

# Every throughput aim in one run beside a local Kafka broker (Kafka's jars from Maven Central
# into .jars-kafka/ on first use, 55 MB; about 40 minutes on 2 cores).
bench-all: setup
	$(BIN)/python benchmarks/all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .jars .jars-kafka .go-clients lakelog-data chaos-runs log_store/jvm/target
