package lakelog.storage;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;

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
 * race. A 412 for an object holding exactly these bytes is this write itself, retried after its
 * answer was lost, and is a success.
 */
final class S3Publisher {
    static final String S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem";
    static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

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
        try {
            FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path).overwrite(false);
            builder.must(CONDITIONAL, true);
            FSDataOutputStream out = (FSDataOutputStream) builder.build();
            try {
                out.write(bytes);
                PutIfAbsentLogStore.pause(pauseMs);
            } finally {
                out.close();  // the PUT, with If-None-Match: *
            }
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

    /** S3A's ways of saying the key exists: its own check before the upload, or S3's 412. */
    static boolean isExistsFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String text = String.valueOf(t.getMessage());
            if (name.endsWith("FileAlreadyExistsException") || name.endsWith("RemoteFileChangedException")
                    || text.contains("412") || text.contains("PreconditionFailed")) {
                return true;
            }
        }
        return false;
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
