package io.muster.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.launcher.JavaModuleOptions;
import org.apache.spark.resource.ExecutorResourceRequest;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.rpc.RpcEndpointAddress;
import org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend;
import org.apache.spark.util.Utils;
import scala.Option;
import scala.Tuple2;

/**
 * What a Spark application asks Muster for, from its settings: the command line of the
 * {@code muster app run --json} link that registers it (queue, cores, executor size, executor
 * limit, custom resources, credentials) and the command Muster's workers run as each executor
 * (Spark's own CoarseGrainedExecutorBackend, connecting back to this driver).
 */
final class AppRequest {
    /** Spark's rule for the memory an executor needs beyond its heap: 10%, at least 384 MB. */
    static final double OVERHEAD_FACTOR = 0.10;
    static final long MIN_OVERHEAD_MB = 384;

    private AppRequest() {}

    /**
     * The link's command line: {@code muster app run --json ... -- EXECUTOR COMMAND}.
     *
     * @throws IllegalArgumentException a setting Muster cannot take
     */
    static List<String> command(SparkContext sc, String masters) {
        SparkConf conf = sc.conf();
        List<String> args = new ArrayList<>();
        args.add(conf.get("spark.muster.bin", System.getenv().getOrDefault("MUSTER_BIN", "muster")));
        // Values as `--flag=value`: a name that starts with `-` stays a value.
        args.addAll(List.of("app", "run", "--json", "--masters=" + masters, "--name=" + sc.appName()));
        args.add("--queue=" + conf.get("spark.muster.queue", "default"));
        if (conf.contains("spark.muster.priority")) {
            args.add("--priority=" + whole(conf, "spark.muster.priority"));
        }
        // Spark's history server will have its jobs once it ends: Muster's page links them.
        if (conf.getBoolean("spark.eventLog.enabled", false)) {
            args.add("--logs-events");
        }
        // The driver's UI, bound before the scheduler starts: Muster shows it with the app.
        Option<String> ui = sc.uiWebUrl();
        if (ui.isDefined()) {
            args.add("--ui-address=" + ui.get());
        }
        if (conf.contains("spark.muster.secretFile")) {
            args.add("--secret-file=" + conf.get("spark.muster.secretFile"));
        }
        if (conf.contains("spark.muster.tlsCa")) {
            args.add("--tls-ca=" + conf.get("spark.muster.tlsCa"));
        }
        if (conf.contains("spark.cores.max")) {
            args.addAll(List.of("--cores-max", Integer.toString(positive(conf, "spark.cores.max"))));
        }
        if (conf.contains("spark.executor.cores")) {
            args.addAll(List.of("--executor-cores", Integer.toString(positive(conf, "spark.executor.cores"))));
        }
        long heapMb = sc.executorMemory();
        args.addAll(List.of("--executor-memory", Long.toString(heapMb + overheadMb(conf, heapMb))));
        Integer limit = executorLimit(conf);
        if (limit != null) {
            args.addAll(List.of("--executor-limit", limit.toString()));
        }
        Integer minimum = minExecutors(conf);
        if (minimum != null) {
            args.addAll(List.of("--min-executors", minimum.toString()));
        }
        String resources = executorResources(conf);
        if (!resources.isEmpty()) {
            args.addAll(List.of("--executor-resources", resources));
        }
        // The values travel in the link's environment, not on a command line others see.
        for (String name : linkEnvironment(sc).keySet()) {
            args.add("--env=" + name);
        }
        args.add("--");
        args.addAll(executorCommand(sc, heapMb));
        return args;
    }

    /**
     * Memory beyond the heap, by Spark's rule: {@code spark.executor.memoryOverhead}, or a share
     * of the heap ({@code spark.executor.memoryOverheadFactor}) but at least
     * {@code spark.executor.minMemoryOverhead}; plus PySpark's and off-heap memory when set.
     */
    static long overheadMb(SparkConf conf, long heapMb) {
        return overheadMb(conf, heapMb, Map.of());
    }

    /**
     * Memory beyond the heap of a resource profile's executors, as {@link #overheadMb(SparkConf,
     * long)} with the amounts the profile sets ({@code memoryOverhead}, {@code pyspark.memory},
     * {@code offHeap}, in MiB) in place of the settings.
     */
    static long overheadMb(SparkConf conf, long heapMb, Map<String, ExecutorResourceRequest> asked) {
        long overhead = asked.containsKey(ResourceProfile.OVERHEAD_MEM())
                ? asked.get(ResourceProfile.OVERHEAD_MEM()).amount()
                : conf.contains("spark.executor.memoryOverhead")
                ? conf.getSizeAsMb("spark.executor.memoryOverhead")
                : Math.max(
                        conf.getSizeAsMb("spark.executor.minMemoryOverhead", MIN_OVERHEAD_MB + "m"),
                        (long) (heapMb * factor(conf)));
        if (asked.containsKey(ResourceProfile.PYSPARK_MEM())) {
            overhead += asked.get(ResourceProfile.PYSPARK_MEM()).amount();
        } else if (conf.contains("spark.executor.pyspark.memory")) {
            overhead += conf.getSizeAsMb("spark.executor.pyspark.memory");
        }
        // As Spark: off-heap memory counts only where it is enabled.
        boolean offHeap = conf.getBoolean("spark.memory.offHeap.enabled", false);
        if (offHeap && asked.containsKey(ResourceProfile.OFFHEAP_MEM())) {
            overhead += asked.get(ResourceProfile.OFFHEAP_MEM()).amount();
        } else if (offHeap) {
            overhead += conf.getSizeAsMb("spark.memory.offHeap.size", "0");
        }
        return overhead;
    }

    /**
     * The variable that tells an executor of a resource profile its heap: the profile's
     * executor command is the application's, and Muster sets the profile's environment.
     */
    static final String HEAP_VARIABLE = "MUSTER_SPARK_EXECUTOR_HEAP_MB";

    /**
     * The link's {@code profile} command: {@code total} executors of resource profile {@code
     * rp}, of its size as Spark's standalone Master takes it: the profile's cores, memory and
     * custom resources, and the application's settings for what it leaves out (custom
     * resources excepted).
     */
    static String profileCommand(SparkContext sc, ResourceProfile rp, int total) {
        SparkConf conf = sc.conf();
        Map<String, ExecutorResourceRequest> asked = rp.executorResourcesJMap();
        long heapMb = asked.containsKey(ResourceProfile.MEMORY())
                ? asked.get(ResourceProfile.MEMORY()).amount()
                : sc.executorMemory();
        ObjectNode command = JSON.createObjectNode()
                .put("id", rp.id())
                .put("executor_limit", total)
                .put("executor_memory_mb", heapMb + overheadMb(conf, heapMb, asked));
        if (asked.containsKey(ResourceProfile.CORES())) {
            command.put("executor_cores", asked.get(ResourceProfile.CORES()).amount());
        } else if (conf.contains("spark.executor.cores")) {
            command.put("executor_cores", positive(conf, "spark.executor.cores"));
        }
        ObjectNode resources = command.putObject("executor_resources");
        for (ExecutorResourceRequest request : asked.values()) {
            if (!STANDARD_RESOURCES.contains(request.resourceName())) {
                resources.put(request.resourceName(), request.amount());
            }
        }
        command.putObject("env").put(HEAP_VARIABLE, Long.toString(heapMb));
        return command.toString();
    }

    private static final ObjectMapper JSON = new ObjectMapper();
    /** A profile's executor amounts that are not custom resources. */
    private static final Set<String> STANDARD_RESOURCES = Set.of(ResourceProfile.CORES(),
            ResourceProfile.MEMORY(), ResourceProfile.OVERHEAD_MEM(), ResourceProfile.PYSPARK_MEM(),
            ResourceProfile.OFFHEAP_MEM());

    private static double factor(SparkConf conf) {
        return Double.parseDouble(conf.get("spark.executor.memoryOverheadFactor", Double.toString(OVERHEAD_FACTOR)));
    }

    /**
     * The most executors the application may hold at first: none with dynamic allocation
     * (Spark's allocation manager asks for its initial number once it starts, as on Spark's
     * standalone cluster), {@code spark.executor.instances} when set, else no limit.
     */
    static Integer executorLimit(SparkConf conf) {
        if (conf.getBoolean("spark.dynamicAllocation.enabled", false)) {
            return 0;
        }
        if (conf.contains("spark.executor.instances")) {
            return positive(conf, "spark.executor.instances");
        }
        return null;
    }

    /**
     * The cores the application expects to register, which {@code
     * spark.scheduler.minRegisteredResourcesRatio} is a share of: {@code spark.cores.max}, as on
     * Spark's standalone cluster; else {@code spark.executor.instances} executors of {@code
     * spark.executor.cores}, as on YARN; else none, and tasks never wait.
     */
    static int expectedCores(SparkConf conf) {
        if (conf.contains("spark.cores.max")) {
            return positive(conf, "spark.cores.max");
        }
        Integer limit = executorLimit(conf);
        if (limit != null && conf.contains("spark.executor.cores")) {
            return limit * positive(conf, "spark.executor.cores");
        }
        return 0;
    }

    /**
     * The executors the application needs at once, its gang, if its settings name one: {@code
     * spark.muster.minExecutors}, or {@code spark.executor.instances} when the application
     * waits for all of them before it schedules a task ({@code
     * spark.scheduler.minRegisteredResourcesRatio} of 1.0) and allocates no executors
     * dynamically; at most what {@code spark.executor.instances} and {@code spark.cores.max}
     * allow. Muster grants a gang all of it at once or nothing.
     *
     * @throws IllegalArgumentException a gang without {@code spark.executor.cores}: a gang's
     *     executors are all of one size
     */
    static Integer minExecutors(SparkConf conf) {
        String key;
        if (conf.contains("spark.muster.minExecutors")) {
            key = "spark.muster.minExecutors";
        } else if (!conf.getBoolean("spark.dynamicAllocation.enabled", false)
                && conf.contains("spark.executor.instances")
                && conf.getDouble("spark.scheduler.minRegisteredResourcesRatio", 0.0) >= 1.0) {
            key = "spark.executor.instances";
        } else {
            return null;
        }
        int minimum = positive(conf, key);
        if (!conf.contains("spark.executor.cores")) {
            throw new IllegalArgumentException(key + " asks for a gang of executors, which needs "
                    + "spark.executor.cores: a gang's executors are all of one size");
        }
        // At most what the application may hold, as the REST gateway counts it.
        Integer limit = executorLimit(conf);
        if (limit != null && limit > 0) {
            minimum = Math.min(minimum, limit);
        }
        if (conf.contains("spark.cores.max")) {
            minimum = Math.min(minimum, positive(conf, "spark.cores.max") / positive(conf, "spark.executor.cores"));
        }
        return minimum > 0 ? minimum : null;
    }

    /** {@code spark.executor.resource.NAME.amount} settings as {@code NAME=AMOUNT,...}. */
    static String executorResources(SparkConf conf) {
        Map<String, Integer> amounts = new TreeMap<>();
        String prefix = "spark.executor.resource.";
        for (Tuple2<String, String> setting : conf.getAll()) {
            String key = setting._1();
            if (key.startsWith(prefix) && key.endsWith(".amount")) {
                String name = key.substring(prefix.length(), key.length() - ".amount".length());
                amounts.put(name, positive(conf, key));
            }
        }
        List<String> entries = new ArrayList<>();
        amounts.forEach((name, amount) -> entries.add(name + "=" + amount));
        return String.join(",", entries);
    }

    /**
     * Where executors find the application's secret when {@code spark.authenticate} is on, as
     * Spark's standalone worker hands it over.
     */
    static final String AUTH_SECRET_VARIABLE = "_SPARK_AUTH_SECRET";

    /**
     * The link's own environment, which it passes on to the executors: {@code
     * spark.executorEnv.*}, and the authentication secret when there is one.
     */
    static Map<String, String> linkEnvironment(SparkContext sc) {
        Map<String, String> environment = new TreeMap<>(ScalaCollections.map(sc.executorEnvs()));
        if (sc.env().securityManager().isAuthenticationEnabled()) {
            environment.put(AUTH_SECRET_VARIABLE, sc.env().securityManager().getSecretKey());
        }
        return environment;
    }

    /**
     * The executor's command: a shell that finds Java ({@code JAVA_HOME}, else {@code java} on
     * the path) and Spark ({@code SPARK_HOME} on the worker, else this driver's) and runs
     * Spark's executor with the id, cores and app id Muster gives it in its environment, and
     * the file of the resource addresses it holds, if it holds any.
     *
     * <p>As on a standalone worker, the executor writes its blocks and shuffle files into the
     * directory the application's executors share on the worker, which the worker removes once
     * the application ended, and where the worker runs a shuffle service, it uses that
     * service's port. Where the masters serve pages, Spark's UI links its output to them.
     */
    static List<String> executorCommand(SparkContext sc, long heapMb) {
        SparkConf conf = sc.conf();
        String driverUrl = new RpcEndpointAddress(
                conf.get("spark.driver.host"),
                Integer.parseInt(conf.get("spark.driver.port")),
                CoarseGrainedSchedulerBackend.ENDPOINT_NAME()).toString();
        List<String> java = new ArrayList<>();
        // As one string: Spark 3.5 has no array of them.
        for (String option : JavaModuleOptions.defaultModuleOptions().split("\\s+")) {
            if (!option.isEmpty()) {
                java.add(option);
            }
        }
        // What an executor needs before it can fetch the rest from its driver.
        for (Tuple2<String, String> setting : conf.getAll()) {
            if (SparkConf.isExecutorStartupConf(setting._1())) {
                java.add("-D" + setting._1() + "=" + setting._2());
            }
        }
        // Spark's own executor options, with standalone's placeholders for the ids: marked
        // here, and once the option is quoted, replaced by the shell variables that hold them.
        for (String key : List.of("spark.executor.defaultJavaOptions", "spark.executor.extraJavaOptions")) {
            if (conf.contains(key)) {
                for (String option : ScalaCollections.list(Utils.splitCommandString(conf.get(key)))) {
                    java.add(option.replace("{{APP_ID}}", "\u0000APP").replace("{{EXECUTOR_ID}}", "\u0000EXECUTOR"));
                }
            }
        }
        StringBuilder script = new StringBuilder();
        String driverSparkHome = System.getenv("SPARK_HOME");
        if (driverSparkHome != null) {
            script.append("[ -n \"$SPARK_HOME\" ] || SPARK_HOME=").append(quote(driverSparkHome)).append("; ");
        }
        script.append("export SPARK_HOME; ")
                .append("[ -z \"$MUSTER_LOCAL_DIR\" ] || export SPARK_EXECUTOR_DIRS=\"$MUSTER_LOCAL_DIR\"; ")
                // Spark's UI links the executor's output to the masters' pages of it.
                .append("[ -z \"$MUSTER_LOG_URL_STDOUT\" ] || export SPARK_LOG_URL_STDOUT=\"$MUSTER_LOG_URL_STDOUT\"")
                .append(" SPARK_LOG_URL_STDERR=\"$MUSTER_LOG_URL_STDERR\"; ")
                .append("exec \"${JAVA_HOME:+$JAVA_HOME/bin/}java\" -cp ");
        String classPath = conf.contains("spark.executor.extraClassPath")
                ? quote(conf.get("spark.executor.extraClassPath")) + ":"
                : "";
        script.append(classPath).append("\"$SPARK_HOME/jars/*\"");
        // A resource profile's executors are told their heap.
        script.append(" \"-Xmx${").append(HEAP_VARIABLE).append(":-").append(heapMb).append("}m\"");
        if (conf.contains("spark.executor.extraLibraryPath")) {
            java.add("-Djava.library.path=" + conf.get("spark.executor.extraLibraryPath"));
        }
        for (String option : java) {
            script.append(' ').append(quote(option)
                    .replace("\u0000APP", "'\"$MUSTER_APP_ID\"'")
                    .replace("\u0000EXECUTOR", "'\"$MUSTER_EXECUTOR_ID\"'"));
        }
        // Last, so that it wins over the application's own setting.
        script.append(" ${MUSTER_SHUFFLE_SERVICE_PORT:+\"-Dspark.shuffle.service.port=$MUSTER_SHUFFLE_SERVICE_PORT\"}");
        script.append(" org.apache.spark.executor.CoarseGrainedExecutorBackend")
                .append(" --driver-url ").append(quote(driverUrl))
                .append(" --executor-id \"$MUSTER_EXECUTOR_ID\" --cores \"$MUSTER_CORES\"")
                .append(" --app-id \"$MUSTER_APP_ID\"")
                // Set for the executors of a resource profile other than the default.
                .append(" --resourceProfileId \"${MUSTER_RESOURCE_PROFILE_ID:-0}\"")
                // Which GPUs (or other resources) are this executor's, as the worker wrote them.
                .append(" ${MUSTER_RESOURCES_FILE:+--resourcesFile \"$MUSTER_RESOURCES_FILE\"}");
        return List.of("/bin/sh", "-c", script.toString(), "spark-executor");
    }

    /** {@code text} as one word for {@code /bin/sh}. */
    static String quote(String text) {
        return "'" + text.replace("'", "'\\''") + "'";
    }

    private static int whole(SparkConf conf, String key) {
        String text = conf.get(key);
        try {
            return Integer.parseInt(text.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": `" + text + "` is not a whole number");
        }
    }

    private static int positive(SparkConf conf, String key) {
        String text = conf.get(key);
        try {
            int value = Integer.parseInt(text.trim());
            if (value > 0) {
                return value;
            }
        } catch (NumberFormatException e) {
            // Refused below.
        }
        throw new IllegalArgumentException(key + ": `" + text + "` is not a positive whole number");
    }
}
