package lakelog.delta;

import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.Snapshot;

import scala.Option;

/**
 * Delta's optimistic transaction, except that its commit never counts as one that reaches the
 * table's checkpoint interval. Delta 4.4 treats a commit whose version is a multiple of {@code
 * delta.checkpointInterval} apart: before the commit returns, and holding the table's snapshot lock,
 * it reconstructs the whole table state (Spark jobs: the newest checkpoint and every commit since)
 * for the statistics it logs ({@code CommitStatsComputer}: the file count and size), then writes the
 * checkpoint from that state. A long-running writer whose commits are its clients' latency
 * ({@code lakelog serve}) commits with this class and writes the checkpoint itself, on another thread
 * and through another {@code DeltaLog} of the table (log_store/checkpoints.py). The commit's
 * conflict checks, actions and files are Delta's own: only the decision to checkpoint changes.
 */
public class DeferredCheckpointTransaction extends OptimisticTransaction {
    public DeferredCheckpointTransaction(DeltaLog deltaLog) {
        super(deltaLog, Option.empty(), Option.empty());
    }

    @Override
    public boolean isCheckpointNeeded(long committedVersion, Snapshot postCommitSnapshot) {
        return false;
    }
}
