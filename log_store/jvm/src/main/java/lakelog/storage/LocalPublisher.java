package lakelog.storage;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Publishing a file on a local disk so that an existing file of the same name makes it fail, in
 * any number of processes: the bytes go to a temporary file in {@code .lakelog-tmp/} beside the
 * target (flushed to disk), then a hard link gives them the target's name. {@code link(2)} fails
 * with {@code EEXIST} when the name exists, atomically, which a rename never does
 * ({@code rename(2)} replaces). The way delta-rs commits to a local table.
 *
 * <p>A process killed between writing its temporary file and removing it leaves the file behind.
 * Temporary files live in their own folder so that Delta's listings of {@code _delta_log} never
 * see them, and every publish removes those of commit files that exist: their writers lost the
 * race or died (a writer that lost finds its file gone and reports the lost race all the same).
 */
final class LocalPublisher {
    /** Where a folder's temporary files are written, inside it. */
    static final String TEMP_DIR = ".lakelog-tmp";
    /** Said by a commit to a table whose log folder is missing (lakelog's Python side maps it to StorageError). */
    static final String MISSING_LOG_FOLDER = "LAKELOG_MISSING_LOG_FOLDER";
    /** A commit file's temporary file: its name, a random id, {@code .tmp}; earlier releases wrote
     * them beside the target with a leading dot. */
    private static final Pattern COMMIT_TEMP = Pattern.compile("\\.?(\\d{20}\\.json)\\.[0-9a-f-]{36}\\.tmp");
    /** Every this many commit versions a publish also looks in the folder itself for the
     * temporary files earlier releases left there. */
    static final long SWEEP_FOLDER_EVERY = 100;

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
        sweep(target);
    }

    /** The bytes in a new file in the target folder's {@link #TEMP_DIR}, on disk. */
    static java.nio.file.Path writeTemp(java.nio.file.Path target, byte[] bytes) throws IOException {
        java.nio.file.Path folder = target.resolveSibling(TEMP_DIR);
        // Only into a log folder that exists (Delta makes it before a new table's first commit): a
        // table whose folder is gone has its root lost or unmounted, and a commit must not make a
        // new log of one version where the table was.
        try {
            Files.createDirectory(folder);
        } catch (FileAlreadyExistsException e) {
            // there already, as it should be after the first commit
        } catch (NoSuchFileException e) {
            throw new NoSuchFileException(target.getParent().toString(), null, MISSING_LOG_FOLDER
                + ": the table's log folder is not there (its root lost or unmounted?); nothing was written");
        }
        java.nio.file.Path temp = folder.resolve(target.getFileName() + "." + UUID.randomUUID() + ".tmp");
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
        } catch (NoSuchFileException e) {
            if (Files.exists(target)) {  // another writer's sweep removed it: the version was taken
                throw new FileAlreadyExistsException(target.toString());
            }
            throw e;
        } catch (UnsupportedOperationException | IOException e) {
            throw new IOException("cannot publish " + target + " put-if-absent: this file system refused a hard link ("
                + e + "). lakelog's log store needs hard links on a local root; a mount without them (some "
                + "network or FUSE mounts) is not safe for concurrent writers: use a local disk, or the object "
                + "store the mount shows (s3a://, abfss://, gs://) as the root.", e);
        }
    }

    /** Remove the temporary files of commit files that exist in {@code target}'s folder (best
     * effort: a file another sweep removed first, or a folder that cannot be listed, is left). */
    static void sweep(java.nio.file.Path target) {
        java.nio.file.Path folder = target.getParent();
        sweepIn(folder.resolve(TEMP_DIR), folder);
        String name = target.getFileName().toString();
        if (name.matches("\\d{20}\\.json") && Long.parseLong(name.substring(0, 20)) % SWEEP_FOLDER_EVERY == 0) {
            sweepIn(folder, folder);
        }
    }

    private static void sweepIn(java.nio.file.Path dir, java.nio.file.Path folder) {
        if (!Files.isDirectory(dir)) {
            return;
        }
        try (DirectoryStream<java.nio.file.Path> entries = Files.newDirectoryStream(dir, "*.tmp")) {
            for (java.nio.file.Path entry : entries) {
                Matcher m = COMMIT_TEMP.matcher(entry.getFileName().toString());
                if (m.matches() && Files.exists(folder.resolve(m.group(1)))) {
                    Files.deleteIfExists(entry);
                }
            }
        } catch (IOException | RuntimeException e) {
            // a later publish sweeps again
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
