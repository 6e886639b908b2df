package lakelog.storage;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Publishing an object on S3 through S3A so that an existing object of the same key makes it
 * fail: S3's conditional write ({@code PUT} with {@code If-None-Match: *}, on S3 since August
 * 2024), which S3A (Hadoop 3.5) sends for a file created with {@code
 * fs.option.create.conditional.overwrite}. S3 answers 412 Precondition Failed when the key
 * exists; that is reported as {@link FileAlreadyExistsException}, what Delta expects of a lost
 * race.
 *
 * <p>A 412 for an object holding exactly these bytes is this write itself, retried after its
 * answer was lost, and is a success. That is sound only if no other writer can produce the same
 * bytes: a commit file's do, because Delta's {@code commitInfo} carries a random {@code txnId}, and
 * a commit without one is refused before it is written ({@link #checkUnique}); the other files
 * written without overwrite (checksums) are derived from a committed version, so equal bytes are
 * the same file.
 *
 * <p>An S3-compatible store that ignores {@code If-None-Match} would let a second writer replace a
 * commit, losing the first silently: the first publish to an endpoint in a JVM probes it (a
 * scratch key created conditionally twice, then removed) and refuses a store that takes both. The
 * answer is kept per endpoint for the JVM's life.
 */
public final class S3Publisher {
    static final String S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem";
    static final String CONDITIONAL = "fs.option.create.conditional.overwrite";
    static final String STORE_SETTING = "spark.delta.logStore.s3a.impl";
    private static final Pattern COMMIT_FILE = Pattern.compile("\\d{20}\\.json");
    /** An HTTP status 412 as S3A's and the AWS SDK's messages write it; never a number inside a
     * longer one (a commit file such as 00000000000000000412.json). */
    private static final Pattern STATUS_412 = Pattern.compile(
        "(?i)(status code:?\\s*412|\\b412\\s+precondition|precondition\\s*failed)");
    /** Per endpoint (scheme, host and port of the bucket's endpoint, or the bucket): whether it
     * honours If-None-Match (true), or the error that refuses it. */
    private static final Map<String, Object> PROBED = new ConcurrentHashMap<>();
    private static final java.util.concurrent.atomic.AtomicInteger PROBES = new java.util.concurrent.atomic.AtomicInteger();

    private S3Publisher() {
    }

    static boolean covers(FileSystem fs) {
        for (Class<?> c = fs.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(S3A)) {
                return true;
            }
        }
        return false;
    }

    static void publish(FileSystem fs, Path path, byte[] bytes, boolean overwrite, long pauseMs) throws IOException {
        if (overwrite) {
            PutIfAbsentLogStore.writeAll(fs.create(path, true), bytes);
            return;
        }
        checkUnique(path, bytes);
        probe(fs, path);
        try {
            putIfAbsent(fs, path, bytes, pauseMs);
        } catch (IOException e) {
            if (!isExistsFailure(e)) {
                throw e;
            }
            if (holds(fs, path, bytes)) {
                return;
            }
            FileAlreadyExistsException lost = new FileAlreadyExistsException(path.toString());
            lost.initCause(e);
            throw lost;
        }
    }

    private static void putIfAbsent(FileSystem fs, Path path, byte[] bytes, long pauseMs) throws IOException {
        FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(false);
        builder.must(CONDITIONAL, true);
        FSDataOutputStream out = (FSDataOutputStream) builder.build();
        try {
            out.write(bytes);
            PutIfAbsentLogStore.pause(pauseMs);
        } finally {
            out.close();  // the PUT, with If-None-Match: *
        }
    }

    /** A commit file's bytes must be its own (see the class's comment): they carry Delta's
     * {@code commitInfo} with its {@code txnId}. */
    public static void checkUnique(Path path, byte[] bytes) throws IOException {
        if (!COMMIT_FILE.matcher(path.getName()).matches()) {
            return;
        }
        String text = new String(bytes, java.nio.charset.StandardCharsets.UTF_8);
        for (String line : text.split("\n")) {
            if (line.startsWith("{\"commitInfo\"") && line.contains("\"txnId\":\"")) {
                return;
            }
        }
        throw new IOException("lakelog's log store will not commit " + path + " on S3: the commit carries no Delta "
            + "commitInfo with a txnId, so a retried write could not tell its own commit from another writer's. "
            + "Keep spark.databricks.delta.commitInfo.enabled true (Delta's default).");
    }

    /** Refuse an endpoint that does not honour If-None-Match (once per endpoint and JVM). */
    static void probe(FileSystem fs, Path path) throws IOException {
        String endpoint = endpointOf(fs, path);
        Object known = PROBED.get(endpoint);
        if (known == null) {
            PROBES.incrementAndGet();
            known = probeOnce(fs, new Path(path.getParent(), ".lakelog-probe-" + UUID.randomUUID()), endpoint);
            PROBED.putIfAbsent(endpoint, known);
        }
        if (known instanceof IOException) {
            throw new IOException(((IOException) known).getMessage());
        }
    }

    /** How many probes this JVM has made (one per endpoint, unless a probe failed to answer). */
    public static int probes() {
        return PROBES.get();
    }

    private static Object probeOnce(FileSystem fs, Path scratch, String endpoint) throws IOException {
        byte[] bytes = ("lakelog probe " + scratch.getName()).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        try {
            putIfAbsent(fs, scratch, bytes, 0);
            try {
                putIfAbsent(fs, scratch, bytes, 0);
            } catch (IOException e) {
                if (isExistsFailure(e)) {
                    return Boolean.TRUE;
                }
                throw e;  // not an answer about conditional writes: probe again next time
            }
            return new IOException("the S3 store at " + endpoint + " ignores conditional writes (If-None-Match: *): it "
                + "accepted a second create of " + scratch + ", so two writers racing for a Delta commit could both "
                + "succeed and one commit would be lost. lakelog's log store (" + STORE_SETTING + "=lakelog.storage."
                + "PutIfAbsentLogStore) needs a store that answers 412 to such a write; for this endpoint set "
                + STORE_SETTING + " to Delta's io.delta.storage.S3DynamoDBLogStore, or use an endpoint that "
                + "supports conditional writes.");
        } finally {
            try {
                fs.delete(scratch, false);
            } catch (IOException e) {
                // a scratch object left behind is harmless: nothing reads it
            }
        }
    }

    private static String endpointOf(FileSystem fs, Path path) {
        String bucket = path.toUri().getHost();
        org.apache.hadoop.conf.Configuration conf = fs.getConf();
        String endpoint = conf.get("fs.s3a.bucket." + bucket + ".endpoint", conf.get("fs.s3a.endpoint", ""));
        return endpoint.isEmpty() ? "s3://" + bucket + " (AWS S3)" : endpoint;
    }

    /** S3A's ways of saying the key exists: its own check before the upload, or S3's 412
     * (the SDK's status code, its error code, or the status in a message). */
    public static boolean isExistsFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            if (name.endsWith("FileAlreadyExistsException") || name.endsWith("RemoteFileChangedException")
                    || statusCode(t) == 412 || STATUS_412.matcher(String.valueOf(t.getMessage())).find()) {
                return true;
            }
        }
        return false;
    }

    /** The HTTP status of an AWS SDK service error ({@code SdkServiceException.statusCode()}), or -1. */
    private static int statusCode(Throwable t) {
        try {
            Object code = t.getClass().getMethod("statusCode").invoke(t);
            return code instanceof Integer ? (Integer) code : -1;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1;
        }
    }

    private static boolean holds(FileSystem fs, Path path, byte[] bytes) {
        try (FSDataInputStream in = fs.open(path)) {
            return Arrays.equals(readAll(in, bytes.length + 1), bytes);
        } catch (IOException e) {
            return false;
        }
    }

    private static byte[] readAll(InputStream in, int limit) throws IOException {
        byte[] buffer = new byte[limit];
        int n = 0;
        while (n < limit) {
            int read = in.read(buffer, n, limit - n);
            if (read < 0) {
                break;
            }
            n += read;
        }
        return Arrays.copyOf(buffer, n);
    }
}
