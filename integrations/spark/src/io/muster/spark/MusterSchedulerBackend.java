package io.muster.spark;

import java.lang.reflect.Field;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.spark.SparkContext;
import org.apache.spark.executor.ExecutorExitCode$;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.rpc.RpcAddress;
import org.apache.spark.scheduler.ExecutorDecommission;
import org.apache.spark.scheduler.ExecutorDecommissionInfo;
import org.apache.spark.scheduler.ExecutorExited;
import org.apache.spark.scheduler.ExecutorLossReason;
import org.apache.spark.scheduler.ExecutorProcessLost;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.concurrent.Future;

/**
 * Spark's scheduler backend on Muster. Spark's CoarseGrainedSchedulerBackend does the work with
 * executors once they have connected (offers, tasks, kills); this class gets them: it registers
 * the application through a {@link MusterLink}, which Muster's workers then start executors for,
 * passes Spark's executor requests and releases on, and turns Muster's news of an executor's end
 * into Spark's loss reasons: an exit with its code, a lost worker (its host's shuffle output is
 * lost with it), a preemption (a decommission, whose lost tasks do not count as failures). A
 * release Spark asked for is left to Spark, which removes the executor when it disconnects.
 *
 * <p>Any other executor whose connection drops is only disabled until Muster says why it ended,
 * as standalone does with {@code spark.standalone.executorRemoveDelayOnDisconnection} and YARN
 * by asking its application master: when its worker is lost, the drop comes first, and removing
 * the executor then would count its running tasks as failed. If Muster says nothing within
 * {@code spark.muster.executorRemoveDelayOnDisconnection} (default 30s; keep it above the
 * masters' worker timeout), Spark removes it as lost, without counting its tasks.
 */
public final class MusterSchedulerBackend extends ScalaBackend
        implements MusterLink.Events {
    private static final Logger LOG = LoggerFactory.getLogger(MusterSchedulerBackend.class);
    /** The exit code of a process the kernel killed for going over its memory limit. */
    private static final int OVER_MEMORY_LIMIT = -104;

    private final TaskSchedulerImpl scheduler;
    private final SparkContext sc;
    private final String masters;
    private final AtomicBoolean stopping = new AtomicBoolean(false);
    /** Executor id to the host it registered from, for a loss that takes the host's output. */
    private final Map<String, String> hosts = new ConcurrentHashMap<>();
    /** Executors Spark gave back: their end is the kill it asked for. */
    private final Set<String> released = ConcurrentHashMap.newKeySet();
    /** Executors Muster decommissions (for prior work, or a drained worker), and why. */
    private final Map<String, String> decommissioned = new ConcurrentHashMap<>();
    /** The cores whose registration {@code minRegisteredResourcesRatio} counts. */
    private final int expectedCores;
    /** How long a disconnected executor waits for Muster's word before Spark removes it. */
    private final long removeDelayMs;
    private final ScheduledExecutorService delayedRemovals =
            Executors.newSingleThreadScheduledExecutor(task -> {
                Thread thread = new Thread(task, "muster-delayed-executor-removal");
                thread.setDaemon(true);
                return thread;
            });
    private volatile MusterLink link;

    MusterSchedulerBackend(TaskSchedulerImpl scheduler, SparkContext sc, String masters) {
        super(scheduler, sc.env().rpcEnv());
        this.scheduler = scheduler;
        this.sc = sc;
        this.masters = masters;
        this.expectedCores = AppRequest.expectedCores(sc.conf());
        this.removeDelayMs = sc.conf().getTimeAsMs("spark.muster.executorRemoveDelayOnDisconnection", "30s");
    }

    @Override
    public DriverEndpoint createDriverEndpoint() {
        return new WaitingEndpoint();
    }

    /**
     * Spark's driver endpoint, waiting for Muster's word on an executor whose connection drops:
     * the executor is disabled (no new tasks, its running ones pending a loss reason) as YARN's
     * backend does while it asks its application master.
     */
    private final class WaitingEndpoint extends DriverEndpoint {
        @Override
        public void onDisconnected(RpcAddress address) {
            if (stopping.get()) {
                // Spark told its executors to shut down: their going is no loss to report (it
                // was logged as an error, and could reach an endpoint already stopped).
                return;
            }
            Option<String> executor = addressToExecutorId().get(address);
            if (executor.isEmpty() || released.contains(executor.get())
                    || !disableExecutor(executor.get())) {
                super.onDisconnected(address);
                return;
            }
            String id = executor.get();
            LOG.info("executor {} disconnected: waiting up to {} ms for Muster to say why", id, removeDelayMs);
            delayedRemovals.schedule(() -> {
                boolean unexplained;
                synchronized (MusterSchedulerBackend.this) {
                    unexplained = executorsPendingLossReason().contains(id);
                }
                // Muster unreachable all that time: no fault of the tasks that were running.
                if (unexplained) {
                    removeExecutor(id, new ExecutorProcessLost("executor " + id + " disconnected and"
                            + " Muster said nothing of it within " + removeDelayMs + " ms",
                            Option.empty(), false));
                }
            }, removeDelayMs, TimeUnit.MILLISECONDS);
        }
    }

    @Override
    public void start() {
        super.start();
        serveResourceProfiles(sc);
        sc.addSparkListener(new SparkListener() {
            @Override
            public void onExecutorAdded(SparkListenerExecutorAdded added) {
                hosts.put(added.executorId(), added.executorInfo().executorHost());
            }
        });
        link = MusterLink.start(AppRequest.command(sc, masters), AppRequest.linkEnvironment(sc), this);
        LOG.info("registered with Muster at {} as {}", masters, link.appId());
    }

    /**
     * Whether Spark may schedule tasks yet: as on Spark's standalone cluster, once {@code
     * spark.scheduler.minRegisteredResourcesRatio} of the cores the application expects have
     * registered (or Spark's {@code maxRegisteredResourcesWaitingTime} has passed).
     */
    @Override
    public boolean sufficientResourcesRegistered() {
        return totalCoreCount().get() >= expectedCores * minRegisteredRatio();
    }

    @Override
    public String applicationId() {
        MusterLink registered = link;
        return registered == null ? super.applicationId() : registered.appId();
    }

    @Override
    public void stop() {
        stopping.set(true);
        delayedRemovals.shutdownNow();
        try {
            super.stop();
        } finally {
            MusterLink registered = link;
            if (registered != null) {
                registered.finish();
            }
        }
    }

    /**
     * Spark's executor totals: the default profile's is the application's executor limit, and
     * every other profile's is asked for with its size (stage-level scheduling).
     */
    @Override
    public Future<Object> doRequestTotalExecutors(
            scala.collection.immutable.Map<ResourceProfile, Object> totals) {
        MusterLink registered = link;
        if (registered == null) {
            return Future.successful(Boolean.FALSE);
        }
        boolean passedOn = true;
        for (Map.Entry<ResourceProfile, Object> entry : ScalaCollections.map(totals).entrySet()) {
            ResourceProfile profile = entry.getKey();
            int total = (Integer) entry.getValue();
            passedOn &= profile.id() == ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID()
                    ? registered.limit(total)
                    : registered.profile(AppRequest.profileCommand(sc, profile, total));
        }
        return Future.successful(passedOn);
    }

    /**
     * Lets the application use resource profiles other than the default: Spark allows them
     * only on the cluster managers it knows by their master's name (standalone's {@code
     * spark://}, YARN, Kubernetes), and Muster serves them as standalone does (with dynamic
     * allocation), so its profile manager is told it runs on one. Without the field (a Spark
     * this plug-in was not built for), Spark refuses profiles with its own message.
     */
    private static void serveResourceProfiles(SparkContext sc) {
        Object manager = sc.resourceProfileManager();
        try {
            Field standalone = manager.getClass().getDeclaredField("isStandaloneOrLocalCluster");
            standalone.setAccessible(true);
            standalone.setBoolean(manager, true);
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn("resource profiles other than the default are not served: {}", e.toString());
        }
    }

    @Override
    Future<Object> releaseExecutors(List<String> ids) {
        released.addAll(ids);
        MusterLink registered = link;
        return Future.successful(registered != null && registered.release(ids));
    }

    @Override
    public void executor(int number, String worker, String state, Integer exitCode) {
        if (stopping.get()) {
            // Spark has stopped its executors and its endpoint: their ends are expected.
            return;
        }
        if (state.equals("LAUNCHING") || state.equals("RUNNING")) {
            return;
        }
        String id = Integer.toString(number);
        ExecutorLossReason reason = lossReason(id, worker, state, exitCode);
        // It has ended: nothing is kept about it.
        hosts.remove(id);
        decommissioned.remove(id);
        released.remove(id);
        if (reason != null) {
            removeExecutor(id, reason);
        }
    }

    /** Why executor {@code id}, which has ended, is gone; null when Spark removes it itself. */
    private ExecutorLossReason lossReason(String id, String worker, String state, Integer exitCode) {
        String where = "Muster executor " + id + " on worker " + worker;
        return switch (state) {
            // A worker Muster names was lost, and its host's shuffle output with it; an end
            // the leader did not see (before its term) names no worker, and loses no host.
            case "LOST" -> new ExecutorProcessLost(where + " was lost with its worker",
                    worker.isEmpty() ? Option.empty() : Option.apply(hosts.get(id)), false);
            case "KILLED" -> {
                String why = decommissioned.get(id);
                if (why != null) {
                    yield new ExecutorDecommission(Option.empty(), where + " " + why);
                }
                // Spark asked for this end and removes the executor itself, deciding whether its
                // lost tasks count (they do when it replaces an executor that stopped answering).
                if (released.contains(id)) {
                    yield null;
                }
                yield new ExecutorProcessLost(where + " was killed", Option.empty(), false);
            }
            default -> {
                if (exitCode == null) {
                    yield new ExecutorProcessLost(where + " could not start (" + state + ")", Option.empty(), true);
                }
                // As on YARN: the kernel killed it for going over its memory limit.
                if (exitCode == OVER_MEMORY_LIMIT) {
                    yield new ExecutorExited(exitCode, true, where + " was killed for going over its"
                            + " memory limit; consider raising spark.executor.memoryOverhead");
                }
                // As standalone: exits that tell of the executor's machine, not of the tasks.
                boolean causedByApp = exitCode != ExecutorExitCode$.MODULE$.HEARTBEAT_FAILURE()
                        && exitCode != ExecutorExitCode$.MODULE$.DISK_STORE_FAILED_TO_CREATE_DIR();
                yield new ExecutorExited(exitCode, causedByApp, where + " exited with code " + exitCode);
            }
        };
    }

    @Override
    public void preempted(int number, long graceMs) {
        if (stopping.get()) {
            return;
        }
        String id = Integer.toString(number);
        decommissioned.put(id, "was preempted for prior work");
        LOG.info("Muster preempts executor {} for prior work within {} ms", id, graceMs);
        decommissionExecutor(id, new ExecutorDecommissionInfo(
                "preempted by Muster for prior work", Option.empty()), false, false);
    }

    @Override
    public void draining(int number, long killAfterMs) {
        if (stopping.get()) {
            return;
        }
        String id = Integer.toString(number);
        decommissioned.put(id, "was stopped with its drained worker");
        LOG.info("Muster drains the worker of executor {} (killed {})", id,
                killAfterMs < 0 ? "never" : "within " + killAfterMs + " ms");
        // The host goes with the worker: its shuffle output is lost unless it moves first.
        decommissionExecutor(id, new ExecutorDecommissionInfo(
                "its worker is drained by Muster", Option.apply(hosts.get(id))), false, false);
    }

    @Override
    public void ended(String state, String reason) {
        if (stopping.get()) {
            return;
        }
        String why = state == null
                ? "the link to the Muster masters ended: " + reason
                : "Muster ended the application: " + state;
        LOG.error("Application has been killed. Reason: {}", why);
        try {
            scheduler.error(why);
        } finally {
            sc.stopInNewThread();
        }
    }
}
