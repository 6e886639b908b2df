package lakelog.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.classic.ClassicConversions$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.Sink;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.RelationProvider;
import org.apache.spark.sql.sources.StreamSinkProvider;
import org.apache.spark.sql.sources.StreamSourceProvider;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.Tuple2;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code format("lakelog")} for {@code spark.read}, {@code spark.readStream}, {@code df.write} and
 * {@code df.writeStream}: Spark's V1 source and sink interfaces, each call handed to lakelog's
 * Python side in the driver ({@link Bridge}). The options reach it as given, with the session's
 * default root ({@code register}'s) under {@code __lakelog_default_root}.
 */
public final class LakelogProvider implements DataSourceRegister, StreamSourceProvider, StreamSinkProvider,
        RelationProvider, CreatableRelationProvider {
    static final String DEFAULT_ROOT = "__lakelog_default_root";

    @Override
    public String shortName() {
        return "lakelog";
    }

    private static Map<String, String> options(SQLContext context, scala.collection.immutable.Map<String, String> given) {
        Map<String, String> out = new HashMap<>(CollectionConverters.asJava(given));
        String root = context.sparkSession().conf().get(Bridge.ROOT_CONF, "");
        if (!root.isEmpty()) {
            out.put(DEFAULT_ROOT, root);
        }
        return out;
    }

    private static StructType schemaOf(String json) {
        return (StructType) DataType.fromJson(json);
    }

    private static SparkSession classic(SQLContext context) {
        return ClassicConversions$.MODULE$.castToImpl(context.sparkSession());
    }

    @Override
    public Tuple2<String, StructType> sourceSchema(SQLContext context, Option<StructType> schema, String provider,
                                                   scala.collection.immutable.Map<String, String> parameters) {
        refuseSchema(schema);
        return new Tuple2<>(shortName(), schemaOf(Bridge.get().readSchema(options(context, parameters), true)));
    }

    @Override
    public Source createSource(SQLContext context, String metadataPath, Option<StructType> schema, String provider,
                               scala.collection.immutable.Map<String, String> parameters) {
        refuseSchema(schema);
        PythonSide side = Bridge.get();
        Map<String, String> given = options(context, parameters);
        StructType columns = schemaOf(side.readSchema(given, true));
        String id = UUID.randomUUID().toString();
        long maxRows = side.open(id, given, metadataPath);
        return new LakelogSource(classic(context), side, id, columns, maxRows);
    }

    @Override
    public BaseRelation createRelation(SQLContext context, scala.collection.immutable.Map<String, String> parameters) {
        PythonSide side = Bridge.get();
        Map<String, String> given = options(context, parameters);
        return new LakelogRelation(context, schemaOf(side.readSchema(given, false)), columns -> side.read(given, columns));
    }

    @Override
    public BaseRelation createRelation(SQLContext context, SaveMode mode,
                                       scala.collection.immutable.Map<String, String> parameters, Dataset<Row> data) {
        Bridge.get().write(options(context, parameters), data, -1L, mode.name());
        StructType written = data.schema();
        return new BaseRelation() {
            @Override
            public SQLContext sqlContext() {
                return context;
            }

            @Override
            public StructType schema() {
                return written;
            }
        };
    }

    @Override
    public Sink createSink(SQLContext context, scala.collection.immutable.Map<String, String> parameters,
                           Seq<String> partitionColumns, OutputMode mode) {
        if (!partitionColumns.isEmpty()) {
            throw new IllegalArgumentException("a lakelog sink takes no partitionBy: a record's partition comes from "
                + "its key or its partition column");
        }
        return new LakelogSink(classic(context), Bridge.get(), options(context, parameters));
    }

    private static void refuseSchema(Option<StructType> schema) {
        if (schema.isDefined()) {
            throw new IllegalArgumentException("format('lakelog') has a fixed schema (Spark's Kafka source's columns): "
                + "drop .schema(...) from the read");
        }
    }
}
