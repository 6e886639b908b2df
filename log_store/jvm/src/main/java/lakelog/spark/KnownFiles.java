package lakelog.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.FileStatusCache;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.InMemoryFileIndex;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Parquet files whose sizes and times the caller knows (a log's files, from its Delta snapshot) as
 * a DataFrame, without listing them: {@code spark.read.parquet(paths)} checks and lists every path
 * (a Spark job of its own beyond 32 paths), which Delta's own reader never does for the files of
 * its log. Partition values come from the folder names under {@code base}, as with the
 * {@code basePath} option.
 */
public final class KnownFiles {
    private KnownFiles() {
    }

    /** A cache that answers every known file with itself, so the file index lists nothing. */
    private static final class Known extends FileStatusCache {
        private final Map<Path, FileStatus[]> files = new HashMap<>();

        @Override
        public Option<FileStatus[]> getLeafFiles(Path path) {
            return Option.apply(files.get(path));
        }

        @Override
        public void putLeafFiles(Path path, FileStatus[] leafFiles) {
            files.put(path, leafFiles);
        }

        @Override
        public void invalidateAll() {
            files.clear();
        }
    }

    /**
     * {@code files}: one line a file, {@code path \t size \t modification time (ms)}; {@code schema}:
     * the table's schema as Spark's JSON (the partition columns among it).
     */
    public static Dataset<Row> parquet(SparkSession session, String base, String files, String schema)
            throws IOException {
        StructType tableSchema = (StructType) DataType.fromJson(schema);
        FileSystem fs = new Path(base).getFileSystem(session.sessionState().newHadoopConf());
        Known cache = new Known();
        List<Path> roots = new ArrayList<>();
        for (String line : files.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split("\t");
            Path path = fs.makeQualified(new Path(parts[0]));
            FileStatus status = new FileStatus(Long.parseLong(parts[1]), false, 1, fs.getDefaultBlockSize(path),
                Long.parseLong(parts[2]), path);
            cache.putLeafFiles(path, new FileStatus[] {status});
            roots.add(path);
        }
        Map<String, String> options = new HashMap<>();
        options.put("basePath", fs.makeQualified(new Path(base)).toString());
        scala.collection.immutable.Map<String, String> params = scala.collection.immutable.Map.from(
            CollectionConverters.asScala(options));
        InMemoryFileIndex index = new InMemoryFileIndex(session, CollectionConverters.asScala(roots).toList(), params,
            Option.apply(tableSchema), cache, Option.empty(), Option.empty());
        StructType partitions = index.partitionSchema();
        List<StructField> data = new ArrayList<>();
        for (StructField field : tableSchema.fields()) {
            if (partitions.getFieldIndex(field.name()).isEmpty()) {
                data.add(field);
            }
        }
        HadoopFsRelation relation = new HadoopFsRelation(index, partitions,
            new StructType(data.toArray(new StructField[0])), Option.empty(), new ParquetFileFormat(), params, session);
        return session.baseRelationToDataFrame(relation);
    }
}
