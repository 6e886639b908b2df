package lakelog.storage.testing;

import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Iterator;
import java.util.UUID;

import io.delta.storage.HadoopFileSystemLogStore;
import lakelog.storage.PutIfAbsentLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * For tests only, never for a real table: the shape of Delta's own stores across JVMs, a check
 * that the commit file is absent followed by a write that does not check again (on a local disk
 * a rename that replaces, as {@code HDFSLogStore} does outside its JVM lock; on S3 a plain PUT,
 * as {@code S3SingleDriverLogStore} does). With {@link PutIfAbsentLogStore#PAUSE_CONF} it sleeps
 * inside that window, so that racing processes lose commits where a test can see it: the
 * negative control of lakelog's store.
 */
public class CheckThenWriteLogStore extends HadoopFileSystemLogStore {
    public CheckThenWriteLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] bytes = PutIfAbsentLogStore.joinLines(actions);
        if (!overwrite && fs.exists(path)) {
            throw new FileAlreadyExistsException(path.toString());
        }
        long pause = hadoopConf.getLong(PutIfAbsentLogStore.PAUSE_CONF, 0L);
        if (fs instanceof LocalFileSystem || fs instanceof RawLocalFileSystem) {
            java.nio.file.Path target = Paths.get(fs.makeQualified(path).toUri());
            java.nio.file.Path temp = target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
            Files.write(temp, bytes);
            sleep(pause);
            Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING);
        } else {
            sleep(pause);
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(bytes);
            }
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return true;
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
