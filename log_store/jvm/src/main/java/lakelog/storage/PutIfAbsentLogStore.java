package lakelog.storage;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for lakelog's roots: a commit file {@code _delta_log/N.json} is written only
 * if no file of that name exists, atomically across processes and machines, so that of two
 * writers racing for version N exactly one wins and the other gets
 * {@link FileAlreadyExistsException} (Delta then reads the winner's commit and retries).
 *
 * <p>Delta's own stores check that the file is absent and then write it: on a local disk
 * ({@code HDFSLogStore}: the rename that publishes the file replaces an existing one) and on S3
 * ({@code S3SingleDriverLogStore}) that check-then-write is atomic only inside one JVM. Here:
 * <ul>
 *   <li>local file system: {@link LocalPublisher}, a hard link from a complete temporary file,
 *       which {@code link(2)} refuses when the target exists;</li>
 *   <li>S3 through S3A: {@link S3Publisher}, S3's conditional write ({@code If-None-Match: *}).</li>
 * </ul>
 * Any other file system is refused with an error naming the store to use instead. Reads and
 * listings are Hadoop's ({@link HadoopFileSystemLogStore}).
 *
 * <p>Set it per scheme: {@code spark.delta.logStore.file.impl}, {@code
 * spark.delta.logStore.s3a.impl} (lakelog's session builder does).
 */
public class PutIfAbsentLogStore extends HadoopFileSystemLogStore {
    /** Milliseconds to sleep between writing a commit's bytes and publishing them (tests only:
     * widens the window a check-then-write store loses commits in). */
    public static final String PAUSE_CONF = "lakelog.logStore.testPauseMs";

    public PutIfAbsentLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] bytes = joinLines(actions);
        long pause = hadoopConf.getLong(PAUSE_CONF, 0L);
        if (LocalPublisher.covers(fs)) {
            LocalPublisher.publish(fs, path, bytes, overwrite, pause);
        } else if (S3Publisher.covers(fs)) {
            S3Publisher.publish(fs, path, bytes, overwrite, pause);
        } else {
            throw new IOException("lakelog's log store (" + getClass().getName() + ") cannot make commits to "
                + path + " put-if-absent: its file system is " + fs.getClass().getName() + ", not the local "
                + "file system or S3A. Use the Delta log store made for that storage "
                + "(spark.delta.logStore." + path.toUri().getScheme() + ".impl), see lakelog's docs/operating.md.");
        }
    }

    /** A local disk may show a half-written file (checkpoints are then written aside and renamed);
     * an S3 object appears whole or not at all. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) throws IOException {
        return !S3Publisher.covers(path.getFileSystem(hadoopConf));
    }

    /** A commit's actions as the bytes of its file: one JSON line each. */
    public static byte[] joinLines(Iterator<String> actions) {
        StringBuilder out = new StringBuilder();
        while (actions.hasNext()) {
            out.append(actions.next()).append('\n');
        }
        return out.toString().getBytes(StandardCharsets.UTF_8);
    }

    static void pause(long millis) throws InterruptedIOException {
        if (millis <= 0) {
            return;
        }
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while pausing before a commit");
        }
    }

    static void writeAll(OutputStream out, byte[] bytes) throws IOException {
        try (OutputStream stream = out) {
            stream.write(bytes);
        }
    }
}
