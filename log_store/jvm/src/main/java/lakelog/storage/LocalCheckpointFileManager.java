package lakelog.storage;

import java.io.ByteArrayOutputStream;
import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager (what Delta writes each commit's {@code .crc} with, and
 * Structured Streaming its checkpoints), with files on a local disk written by {@link
 * LocalPublisher} rather than through Hadoop's local file system: without Hadoop's native library
 * that file system starts a process for every permission it sets and every link it reads
 * ({@code chmod}, {@code readlink}), about ten for each {@code .crc}, and starting a process from a JVM
 * costs about as much as the rest of a Delta commit. The file appears whole (a hard link from a
 * complete file, or an atomic rename when overwriting), as Spark's rename-based manager promises:
 * put-if-absent unless overwriting, as {@link PutIfAbsentLogStore}'s commits. Only files directly in
 * a {@code _delta_log} folder are written so (their temporary files go to its {@code .lakelog-tmp/},
 * which Delta's listings skip); Structured Streaming's checkpoints, whose readers list their folders
 * expecting Spark's own temporary names, every other call, and every file system but the local one
 * are Spark's own manager's.
 *
 * <p>Set with {@code spark.sql.streaming.checkpointFileManagerClass} (lakelog's session builder does).
 */
public class LocalCheckpointFileManager implements CheckpointFileManager {
    /** The only folder whose files this manager writes itself: a Delta table's log. */
    static final String DELTA_LOG = "_delta_log";
    private final CheckpointFileManager spark;
    private final FileSystem fs;

    public LocalCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
        this.fs = path.getFileSystem(hadoopConf);
        this.spark = sparksOwn(path, hadoopConf);
    }

    /** The manager Spark picks when none is set: FileContext's, or FileSystem's where there is no FileContext. */
    private static CheckpointFileManager sparksOwn(Path path, Configuration hadoopConf) throws IOException {
        try {
            return new FileContextBasedCheckpointFileManager(path, hadoopConf);
        } catch (Exception e) {  // Scala declares no exceptions: Java cannot catch the checked one by name
            if (e instanceof UnsupportedFileSystemException) {
                return new FileSystemBasedCheckpointFileManager(path, hadoopConf);
            }
            if (e instanceof IOException) {
                throw (IOException) e;
            }
            throw (RuntimeException) e;
        }
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        if (!LocalPublisher.covers(fs) || path.getParent() == null || !DELTA_LOG.equals(path.getParent().getName())) {
            return spark.createAtomic(path, overwriteIfPossible);
        }
        return new Published(new ByteArrayOutputStream(), path, overwriteIfPossible);
    }

    /** The bytes written, published at {@code path} on close; nothing is, if cancelled. */
    private final class Published extends CancellableFSDataOutputStream {
        private final ByteArrayOutputStream bytes;
        private final Path target;
        private final boolean overwrite;
        private boolean done;

        Published(ByteArrayOutputStream bytes, Path target, boolean overwrite) {
            super(bytes);
            this.bytes = bytes;
            this.target = target;
            this.overwrite = overwrite;
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            super.close();
            LocalPublisher.publish(fs, target, bytes.toByteArray(), overwrite, 0L);
        }

        @Override
        public synchronized void cancel() {
            done = true;
        }
    }

    @Override
    public FSDataInputStream open(Path path) {
        return spark.open(path);
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        return spark.list(path, filter);
    }

    @Override
    public FileStatus[] list(Path path) {
        return spark.list(path);
    }

    @Override
    public void mkdirs(Path path) {
        spark.mkdirs(path);
    }

    @Override
    public boolean exists(Path path) {
        return spark.exists(path);
    }

    @Override
    public void delete(Path path) {
        spark.delete(path);
    }

    @Override
    public boolean isLocal() {
        return spark.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        return spark.createCheckpointDirectory();
    }

    @Override
    public void close() {
        spark.close();
    }
}
