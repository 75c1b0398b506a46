package io.muster.spark;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.ExternalClusterManager;
import org.apache.spark.scheduler.SchedulerBackend;
import org.apache.spark.scheduler.TaskScheduler;
import org.apache.spark.scheduler.TaskSchedulerImpl;

/**
 * Spark's entry to Muster: SparkContext asks every cluster manager on its class path (found by
 * ServiceLoader through META-INF/services) whether it takes the master URL, and this one takes
 * {@code spark-muster://HOST:PORT,...} (the form spark-submit lets through) and
 * {@code muster://HOST:PORT,...} (for URLs set in code). Tasks are scheduled by Spark's own
 * TaskSchedulerImpl; executors come from Muster through {@link MusterSchedulerBackend}.
 */
public final class MusterClusterManager implements ExternalClusterManager {
    static final String[] SCHEMES = {"spark-muster://", "muster://"};

    @Override
    public boolean canCreate(String masterUrl) {
        return masters(masterUrl) != null;
    }

    @Override
    public TaskScheduler createTaskScheduler(SparkContext sc, String masterUrl) {
        return new TaskSchedulerImpl(sc);
    }

    @Override
    public SchedulerBackend createSchedulerBackend(
            SparkContext sc, String masterUrl, TaskScheduler scheduler) {
        return new MusterSchedulerBackend((TaskSchedulerImpl) scheduler, sc, masters(masterUrl));
    }

    @Override
    public void initialize(TaskScheduler scheduler, SchedulerBackend backend) {
        ((TaskSchedulerImpl) scheduler).initialize(backend);
    }

    /** The {@code HOST:PORT,...} list of a Muster master URL, or null for another URL. */
    static String masters(String masterUrl) {
        for (String scheme : SCHEMES) {
            if (masterUrl.startsWith(scheme)) {
                return masterUrl.substring(scheme.length());
            }
        }
        return null;
    }
}
