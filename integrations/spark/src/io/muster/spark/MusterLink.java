package io.muster.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Collection;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The application's link to the Muster masters: a {@code muster app run --json} child process,
 * so that leader discovery, failover, the app token and TLS live in one place, Muster's own
 * client. It prints one JSON object per line (the registration, executor changes, preemption
 * notices, reconnections, the end) and takes commands on its standard input ({@code limit N},
 * {@code release ID ...}, {@code profile JSON}); closing its input finishes the application, so
 * a driver that dies ends its application too.
 */
final class MusterLink {
    private static final Logger LOG = LoggerFactory.getLogger(MusterLink.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    /** Lines of the link's standard error kept to explain an end. */
    private static final int KEPT_ERRORS = 5;

    /** What the link reports, on its reader thread. */
    interface Events {
        /** An executor as the masters have it now. */
        void executor(int id, String worker, String state, Integer exitCode);

        /** An executor is stopped for prior work; its end follows. */
        void preempted(int id, long graceMs);

        /** An executor's worker is drained: it is killed after {@code killAfterMs} (negative: never). */
        void draining(int id, long killAfterMs);

        /** The link ended: the application ended as {@code state}, or the link broke ({@code null}). */
        void ended(String state, String reason);
    }

    private final Process process;
    private final Writer commands;
    private final CompletableFuture<String> registered = new CompletableFuture<>();
    private final Deque<String> errors = new ArrayDeque<>();

    private MusterLink(Process process) {
        this.process = process;
        this.commands = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
    }

    /**
     * Starts the link with {@code command} and waits until the application is registered.
     *
     * @throws IllegalStateException the link cannot start, or it ended before the registration
     *     (an unknown queue, a refused credential, no masters): the message is the link's own
     */
    static MusterLink start(List<String> command, Map<String, String> environment, Events events) {
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.environment().putAll(environment);
        Process process;
        try {
            process = builder.start();
        } catch (IOException e) {
            throw new IllegalStateException("cannot run the muster command `" + command.get(0) + "` ("
                    + e.getMessage() + "): put it on the PATH, or name it with spark.muster.bin or MUSTER_BIN");
        }
        MusterLink link = new MusterLink(process);
        Thread errors = new Thread(link::readErrors, "muster-link-stderr");
        errors.setDaemon(true);
        errors.start();
        Thread reader = new Thread(() -> link.readEvents(events, errors), "muster-link");
        reader.setDaemon(true);
        reader.start();
        try {
            link.registered.get();
        } catch (ExecutionException e) {
            process.destroyForcibly();
            throw new IllegalStateException("Muster did not register the application: " + e.getCause().getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
            throw new IllegalStateException("interrupted while registering with Muster");
        }
        return link;
    }

    /** The application's id, as Muster named it. */
    String appId() {
        return registered.getNow(null);
    }

    /** Caps the executors at {@code total}: Spark's total request. Whether it was passed on. */
    boolean limit(int total) {
        return send("limit " + total);
    }

    /** Asks for executors of a resource profile: the link's {@code profile} command's JSON. */
    boolean profile(String json) {
        return send("profile " + json);
    }

    /** Gives these executors back. Whether it was passed on. */
    boolean release(Collection<String> ids) {
        return ids.isEmpty() || send("release " + String.join(" ", ids));
    }

    /** Finishes the application and waits (a while) for the link to end. */
    void finish() {
        try {
            commands.close();
        } catch (IOException e) {
            // The link has ended already.
        }
        try {
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                LOG.warn("the Muster link did not end within 30 s of finishing; killing it");
                process.destroyForcibly();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            process.destroyForcibly();
        }
    }

    private synchronized boolean send(String line) {
        try {
            commands.write(line + "\n");
            commands.flush();
            return true;
        } catch (IOException e) {
            LOG.warn("cannot tell the Muster link `{}`: {}", line, e.getMessage());
            return false;
        }
    }

    private void readEvents(Events events, Thread errorReader) {
        String state = null;
        try (BufferedReader lines = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                try {
                    state = dispatch(JSON.readTree(line), events, state);
                } catch (RuntimeException | JsonProcessingException e) {
                    // One event Spark could not take must not stop the link being read.
                    LOG.warn("Muster link: cannot handle `{}`", line, e);
                }
            }
        } catch (IOException e) {
            LOG.warn("reading the Muster link: {}", e.getMessage());
        }
        String reason = endReason(errorReader);
        // Before the registration, the end is the start's failure; after it, the application's.
        if (!registered.completeExceptionally(new IllegalStateException(reason))) {
            events.ended(state, reason);
        }
    }

    /** Hands one event to Spark; returns the application's end state once it has one. */
    private String dispatch(JsonNode event, Events events, String state) {
        switch (event.path("event").asText()) {
            case "registered" -> registered.complete(event.path("app_id").asText());
            case "executor" -> events.executor(
                    event.path("executor_id").asInt(),
                    event.path("worker").asText(),
                    event.path("state").asText(),
                    event.path("exit_code").isInt() ? event.path("exit_code").asInt() : null);
            case "preempted" -> events.preempted(
                    event.path("executor_id").asInt(), event.path("grace_ms").asLong());
            case "draining" -> events.draining(
                    event.path("executor_id").asInt(), event.path("kill_after_ms").asLong(-1));
            case "reconnecting" -> LOG.warn("Muster: lost the leader ({}); reconnecting",
                    event.path("reason").asText());
            // No executor of that profile comes: its stages wait until the application ends.
            case "profile_refused" -> LOG.error(
                    "Muster refused resource profile {}: {}; stages that need it cannot run",
                    event.path("profile_id").asInt(), event.path("reason").asText());
            case "ended" -> {
                return event.path("state").asText();
            }
            default -> LOG.debug("Muster link: {}", event);
        }
        return state;
    }

    /** Why the link ended, in its own words (its last line of standard error). */
    private String endReason(Thread errorReader) {
        try {
            process.waitFor(10, TimeUnit.SECONDS);
            errorReader.join(TimeUnit.SECONDS.toMillis(2));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (errors) {
            String last = errors.isEmpty() ? "" : errors.getLast();
            String code = process.isAlive() ? "" : " (exit " + process.exitValue() + ")";
            return last.isEmpty() ? "the link ended" + code : last.replaceFirst("^error: ", "") + code;
        }
    }

    private void readErrors() {
        try (BufferedReader lines = new BufferedReader(
                new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
            for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                LOG.info("muster: {}", line);
                synchronized (errors) {
                    errors.addLast(line);
                    if (errors.size() > KEPT_ERRORS) {
                        errors.removeFirst();
                    }
                }
            }
        } catch (IOException e) {
            // The link has ended.
        }
    }
}
