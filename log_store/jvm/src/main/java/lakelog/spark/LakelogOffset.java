package lakelog.spark;

import org.apache.spark.sql.execution.streaming.Offset;

/** A stream's offset: lakelog's JSON (pipelines.spark.offsets), compared by its text. */
public final class LakelogOffset extends Offset {
    private final String json;

    public LakelogOffset(String json) {
        this.json = json;
    }

    @Override
    public String json() {
        return json;
    }
}
