package lakelog.spark;

/**
 * The driver's {@link PythonSide}, installed by {@code pipelines.spark.register}. One per JVM: a
 * Python process attached to a JVM another one drives (lakelog's tests and fault campaign) uses
 * the one installed, since py4j calls back one Python process per JVM; a side whose process has
 * exited is replaced by the next to register.
 */
public final class Bridge {
    /** The session setting that carries {@code register}'s default root into every read and write. */
    public static final String ROOT_CONF = "lakelog.root";
    private static volatile PythonSide side;

    private Bridge() {
    }

    /** Install {@code candidate} unless a live side is installed; true if it was. */
    public static synchronized boolean install(PythonSide candidate) {
        if (side != null && alive(side)) {
            return false;
        }
        side = candidate;
        return true;
    }

    /** Whether a live side is installed. */
    public static synchronized boolean serving() {
        return side != null && alive(side);
    }

    /** Forget the installed side (its Python process is closing). */
    public static synchronized void uninstall(PythonSide which) {
        if (side == which) {
            side = null;
        }
    }

    static PythonSide get() {
        PythonSide found = side;
        if (found == null || !alive(found)) {
            throw new IllegalStateException("format('lakelog') runs lakelog's planner and producer in the driver's "
                + "Python process: call pipelines.spark.register(spark) in the PySpark driver first"
                + (found == null ? "" : " (the Python process that registered it has exited)"));
        }
        return found;
    }

    private static boolean alive(PythonSide candidate) {
        try {
            return candidate.alive();
        } catch (RuntimeException e) {
            return false;
        }
    }
}
