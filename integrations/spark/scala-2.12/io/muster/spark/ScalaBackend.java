package io.muster.spark;

import java.util.List;

import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import scala.concurrent.Future;

/**
 * Spark's CoarseGrainedSchedulerBackend with what differs between Scala 2.12 and the other
 * Scala Spark is built for: the type of the executors a kill names, here {@code scala.collection.Seq}.
 */
abstract class ScalaBackend extends CoarseGrainedSchedulerBackend {
    ScalaBackend(TaskSchedulerImpl scheduler, RpcEnv rpcEnv) {
        super(scheduler, rpcEnv);
    }

    @Override
    public final Future<Object> doKillExecutors(scala.collection.Seq<String> ids) {
        return releaseExecutors(ScalaCollections.list(ids));
    }

    /** Gives executors {@code ids} back, as Spark asked. */
    abstract Future<Object> releaseExecutors(List<String> ids);
}
