package lakelog.storage;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.UUID;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Publishing a file on a local disk so that an existing file of the same name makes it fail, in
 * any number of processes: the bytes go to a temporary file beside the target (flushed to disk),
 * then a hard link gives them the target's name. {@code link(2)} fails with {@code EEXIST} when
 * the name exists, atomically, which a rename never does ({@code rename(2)} replaces). The way
 * delta-rs commits to a local table.
 */
final class LocalPublisher {
    private LocalPublisher() {
    }

    static boolean covers(FileSystem fs) {
        return fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem;
    }

    static java.nio.file.Path localPath(FileSystem fs, Path path) {
        return Paths.get(fs.makeQualified(path).toUri());
    }

    /** Write {@code bytes} at {@code path}: replacing what is there when {@code overwrite}, else
     * only if nothing is ({@link FileAlreadyExistsException} otherwise). */
    static void publish(FileSystem fs, Path path, byte[] bytes, boolean overwrite, long pauseMs) throws IOException {
        java.nio.file.Path target = localPath(fs, path);
        java.nio.file.Path temp = writeTemp(target, bytes);
        try {
            PutIfAbsentLogStore.pause(pauseMs);
            if (overwrite) {
                Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } else {
                link(target, temp);
            }
            syncDirectory(target.getParent());
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    /** The bytes in a new hidden file beside {@code target}, on disk. */
    static java.nio.file.Path writeTemp(java.nio.file.Path target, byte[] bytes) throws IOException {
        Files.createDirectories(target.getParent());
        java.nio.file.Path temp = target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        try (FileChannel channel = FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            ByteBuffer buffer = ByteBuffer.wrap(bytes);
            while (buffer.hasRemaining()) {
                channel.write(buffer);
            }
            channel.force(true);
        } catch (IOException e) {
            Files.deleteIfExists(temp);
            throw e;
        }
        return temp;
    }

    private static void link(java.nio.file.Path target, java.nio.file.Path temp) throws IOException {
        try {
            Files.createLink(target, temp);
        } catch (FileAlreadyExistsException e) {
            throw new FileAlreadyExistsException(target.toString());
        } catch (UnsupportedOperationException | IOException e) {
            throw new IOException("cannot publish " + target + " put-if-absent: this file system refused a hard link ("
                + e + "). lakelog's log store needs hard links on a local root; a mount without them (some "
                + "network or FUSE mounts) is not safe for concurrent writers: use a local disk, or the object "
                + "store the mount shows (s3a://, abfss://, gs://) as the root.", e);
        }
    }

    /** Make the new name durable (best effort: some file systems cannot open a directory). */
    private static void syncDirectory(java.nio.file.Path dir) {
        try (FileChannel channel = FileChannel.open(dir, StandardOpenOption.READ)) {
            channel.force(true);
        } catch (IOException | RuntimeException e) {
            // the name is published; durability of the directory entry is the file system's
        }
    }
}
