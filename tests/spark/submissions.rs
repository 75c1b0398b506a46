//! `spark-submit --deploy-mode cluster` against the masters' Spark REST gateways
//! (`--spark-rest`), with the master URL `spark://HOST:PORT/TOKEN,...` as a standalone user
//! gives it but for the token: create, status, kill and supervise with real spark-submit, the
//! leader killed between create and status, and what is refused (no token, a wrong one, a
//! revoked user's, bad JSON, a resource not allowed or not there).

use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, Process, app_run, plain_http, running_executors, stdout, wait_for,
    worker_command,
};
use crate::{
    FAST_START, Spark, finished_driver, spark, square_sums, submission_id, with_every_spark,
};

/// Three masters serving the gateway with the plug-in, and two two-core workers whose
/// drivers find Spark in their `SPARK_HOME`, every worker ALIVE.
fn gateway_cluster(spark: &Spark, extra_args: &[&str]) -> (Masters, Vec<Process>) {
    let mut args = vec!["--spark-plugin", spark.jar.to_str().unwrap()];
    args.extend_from_slice(extra_args);
    let masters = Masters::start_with_spark_rest(&args);
    let via = masters.list_from(1);
    let workers = (1..=2)
        .map(|i| {
            let mut command = worker_command(&masters, &format!("worker-{i}"), 2, &via, &[]);
            Process(
                command
                    .env("SPARK_HOME", &spark.home)
                    .spawn()
                    .expect("muster worker starts"),
            )
        })
        .collect();
    wait_for(&masters, "the workers", |s| {
        crate::support::alive_workers(s) == 2 && s["recovery_state"] == "ALIVE"
    });
    (masters, workers)
}

/// The cluster's own token, as `muster rest-token` prints it.
fn cluster_token() -> String {
    stdout(&crate::support::muster().arg("rest-token").output().unwrap())
        .trim()
        .to_owned()
}

/// The master URL of `gateways`, each with `token`.
fn url(gateways: &[&String], token: &str) -> String {
    let each: Vec<String> = gateways.iter().map(|g| format!("{g}/{token}")).collect();
    format!("spark://{}", each.join(","))
}

impl Spark {
    /// `spark-submit --master URL` with `args`, as a user of a standalone cluster runs it
    /// with the REST submission protocol (and nothing of Muster's).
    fn standalone_submit(&self, master_url: &str, args: &[&str]) -> Output {
        Command::new(self.home.join("bin/spark-submit"))
            .env("SPARK_HOME", &self.home)
            .args(["--master", master_url])
            .args(["--conf", "spark.master.rest.enabled=true"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spark-submit runs")
    }

    /// Submits `args` in cluster mode: the driver's id.
    fn create(&self, master_url: &str, args: &[&str]) -> String {
        let mut all = vec![
            "--deploy-mode",
            "cluster",
            "--driver-java-options",
            FAST_START,
            "--conf",
            "spark.ui.enabled=false",
        ];
        all.extend_from_slice(args);
        let output = self.standalone_submit(master_url, &all);
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "spark-submit failed: {log}");
        submission_id(&log)
    }
}

/// A gateway's answer: the HTTP status code and the JSON reply.
fn call(gateway: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, Value) {
    let response = plain_http(gateway, method, path, headers, body);
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    let (_, json) = response.split_once("\r\n\r\n").expect("a body");
    let reply = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    (code, reply)
}

/// A gateway's answer that must be a success, 200 with `success: true`: its reply.
fn successful((code, reply): (u16, Value)) -> Value {
    assert_eq!(
        (code, &reply["success"]),
        (200, &Value::Bool(true)),
        "{reply}"
    );
    reply
}

/// Submission `id`'s status through `gateway`.
fn submission_status(gateway: &str, token: &str, id: &str) -> Value {
    let (code, reply) = call(
        gateway,
        "GET",
        &format!("/{token}/v1/submissions/status/{id}"),
        &[],
        "",
    );
    assert_eq!(code, 200, "{reply}");
    reply
}

/// Polls submission `id` through `gateway` until it is FINISHED, within three deadlines;
/// any state but SUBMITTED, RUNNING and FINISHED fails the test. While the masters elect a
/// leader the gateway answers 503 (try again), and the poll does.
fn wait_until_finished(gateway: &str, token: &str, id: &str) {
    let start = Instant::now();
    loop {
        let path = format!("/{token}/v1/submissions/status/{id}");
        let (code, status) = call(gateway, "GET", &path, &[], "");
        if code == 503 && start.elapsed() < DEADLINE {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        assert_eq!(code, 200, "{status}");
        let state = status["driverState"].as_str().unwrap_or_default();
        assert!(
            ["SUBMITTED", "RUNNING", "FINISHED"].contains(&state),
            "{status}"
        );
        if state == "FINISHED" {
            return;
        }
        assert!(start.elapsed() < 3 * DEADLINE, "not finished: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Every driver `status` shows, ended or not.
fn drivers(status: &Value) -> Vec<&str> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect()
}

/// A submission of `SquareSums 10000` as Spark's REST client posts it, for `resource`.
fn create_body(resource: &str, properties: &str) -> String {
    format!(
        r#"{{"action": "CreateSubmissionRequest", "appResource": "{resource}",
            "mainClass": "SquareSums", "appArgs": ["10000"], "clientSparkVersion": "4.3.0",
            "environmentVariables": {{}}, "sparkProperties": {{{properties}}}}}"#
    )
}

#[test]
fn a_supervised_submission_through_a_follower_outlives_the_leader_and_its_own_process() {
    with_every_spark(|spark| {
        let (mut masters, _workers) = gateway_cluster(spark, &[]);
        let token = cluster_token();
        let leader = masters.leader(0);
        let follower = if leader == 1 { 2 } else { 1 };
        let third = 6 - leader - follower;
        // Only a follower's gateway in the URL: it reaches the leader itself.
        let via_follower = url(&[&masters.spark_rest[follower as usize - 1]], &token);
        let id = spark.create(
            &via_follower,
            &[
                "--supervise",
                "--driver-memory",
                "1g",
                "--conf",
                "spark.executor.cores=1",
                "--conf",
                "spark.executor.memory=512m",
                &format!("--conf=spark.executor.extraJavaOptions={FAST_START}"),
                "--class",
                "SquareSums",
                spark.examples.to_str().unwrap(),
                "10000",
            ],
        );
        let pid = crate::support::driver_pid(&masters, &id);
        wait_for(&masters, "the driver's application", |s| {
            !s["apps"].as_array().unwrap().is_empty()
        });

        // The leader dies, then the driver's whole process group: the new leader starts it again.
        masters.running[leader as usize - 1].take().unwrap().crash();
        masters.leader(leader);
        let group = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
        wait_until_finished(&masters.spark_rest[third as usize - 1], &token, &id);
        // spark-submit --status finds it through any master of the URL, the dead one first.
        let all = url(&masters.spark_rest.iter().collect::<Vec<_>>(), &token);
        let status = spark.standalone_submit(&all, &["--status", &id]);
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );

        let list = masters.list_from(follower as usize);
        let printed = stdout(&Masters::client(&list, &["logs", &id]));
        let summed: std::collections::BTreeMap<u64, u64> = printed
            .lines()
            .filter_map(|line| {
                let (remainder, sum) = line.split_once(' ')?;
                Some((remainder.parse().ok()?, sum.parse().ok()?))
            })
            .collect();
        assert_eq!(summed, square_sums(10_000));
        // One submission, one driver: started twice, under one id.
        let status = crate::status(&list);
        assert_eq!(drivers(&status), [id.as_str()], "{status}");
    });
}

#[test]
fn a_burst_of_submissions_larger_than_the_cluster_all_finish() {
    with_every_spark(|spark| {
        let (masters, _workers) = gateway_cluster(spark, &[]);
        let token = cluster_token();
        let all = url(&masters.spark_rest.iter().collect::<Vec<_>>(), &token);
        // Five drivers of one core and their two one-core executors each, on four cores: as
        // on Spark's standalone master, drivers alone could take every core.
        let args = [
            "--driver-cores",
            "1",
            "--driver-memory",
            "512m",
            "--total-executor-cores",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            &format!("--conf=spark.executor.extraJavaOptions={FAST_START}"),
            "--class",
            "SquareSums",
            spark.examples.to_str().unwrap(),
            "1000",
        ];
        let ids: Vec<String> = std::thread::scope(|scope| {
            let submitting: Vec<_> = (0..5)
                .map(|_| scope.spawn(|| spark.create(&all, &args)))
                .collect();
            submitting.into_iter().map(|s| s.join().unwrap()).collect()
        });
        // The drivers' share (half of the four cores) holds the others back.
        let status = wait_for(&masters, "drivers held back by the drivers' share", |s| {
            s["drivers"].as_array().unwrap().iter().any(|d| {
                d["waiting"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("drivers of queue `default` hold 2 of 2 cores"))
            })
        });
        let running = |s: &Value| {
            s["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["state"] == "RUNNING")
                .count()
        };
        assert!(running(&status) <= 2, "{status}");
        for id in &ids {
            wait_until_finished(&masters.spark_rest[0], &token, id);
        }
        let list = masters.list_from(1);
        for id in &ids {
            let printed = stdout(&Masters::client(&list, &["logs", id]));
            assert!(
                printed.lines().any(|line| line.starts_with("0 ")),
                "{id} printed its sums: {printed}"
            );
        }
    });
}

#[test]
fn a_submission_whose_settings_name_a_gang_starts_when_all_of_it_fits_and_gets_it_at_once() {
    with_every_spark(|spark| {
        let (masters, _workers) = gateway_cluster(spark, &[]);
        let token = cluster_token();
        let all = url(&masters.spark_rest.iter().collect::<Vec<_>>(), &token);
        // Another application holds two of the four cores.
        let (_blocker, blocker, _out) = app_run(
            &masters,
            &[
                "--name",
                "blocker",
                "--executor-cores",
                "2",
                "--cores-max",
                "2",
                "--executor-memory",
                "64",
                "--",
                "/bin/sleep",
                "600",
            ],
        );
        wait_for(&masters, "the blocker's executor", |s| {
            !running_executors(s, &blocker).is_empty()
        });
        // A driver of one core whose application waits for all three of its executors.
        let id = spark.create(
            &all,
            &[
                "--driver-memory",
                "512m",
                "--conf",
                "spark.executor.instances=3",
                "--executor-cores",
                "1",
                "--executor-memory",
                "512m",
                "--conf",
                "spark.scheduler.minRegisteredResourcesRatio=1.0",
                &format!("--conf=spark.executor.extraJavaOptions={FAST_START}"),
                "--class",
                "SquareSums",
                spark.examples.to_str().unwrap(),
                "1000",
            ],
        );
        let status = wait_for(&masters, "the driver waiting for its gang", |s| {
            s["drivers"].as_array().unwrap().iter().any(|d| {
                d["id"] == id.as_str()
                    && d["waiting"].as_str().is_some_and(|w| {
                        w.starts_with("its application's gang of 3 executors and the driver")
                    })
            })
        });
        assert_eq!(crate::support::driver_state(&status, &id), "SUBMITTED");
        assert_eq!(status["apps"].as_array().unwrap().len(), 1, "{status}");

        let list = masters.list_from(1);
        stdout(&Masters::client(&list, &["kill", &blocker]));
        // The driver starts, and its application, a gang of three, gets all three at once.
        let status = wait_for(&masters, "the gang's application with its executors", |s| {
            s["apps"].as_array().unwrap().iter().any(|a| {
                a["min_executors"] == 3 && a["executors"].as_array().is_some_and(|e| !e.is_empty())
            })
        });
        let app = status["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["min_executors"] == 3)
            .unwrap();
        assert_eq!(app["executors"].as_array().unwrap().len(), 3, "{status}");
        wait_until_finished(&masters.spark_rest[0], &token, &id);
    });
}

#[test]
fn spark_submit_kills_a_submission_and_killall_the_rest() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = gateway_cluster(spark, &[]);
    let token = cluster_token();
    let all = url(&masters.spark_rest.iter().collect::<Vec<_>>(), &token);
    // Eight cores fit no two-core worker: they wait for room, and run nothing meanwhile.
    let waiting = [
        "--driver-cores",
        "8",
        "--class",
        "SquareSums",
        "/nowhere/app.jar",
        "1",
    ];
    let first = spark.create(&all, &waiting);
    let second = spark.create(&all, &waiting);
    assert_ne!(first, second);
    let gateway = &masters.spark_rest[0];
    assert_eq!(
        submission_status(gateway, &token, &first)["driverState"],
        "SUBMITTED"
    );

    // The same submission sent again (an answer lost, another master tried) is the same one.
    let body = create_body("file:/nowhere/app.jar", r#""spark.driver.cores": "8""#);
    let path = format!("/{token}/v1/submissions/create");
    let (_, sent) = call(gateway, "POST", &path, &[], &body);
    let (_, again) = call(&masters.spark_rest[2], "POST", &path, &[], &body);
    assert_eq!(
        sent["submissionId"], again["submissionId"],
        "{sent} {again}"
    );
    let third = sent["submissionId"].as_str().unwrap().to_owned();

    let killed = spark.standalone_submit(&all, &["--kill", &first]);
    assert!(
        killed.status.success(),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    wait_for(&masters, "the first killed", |s| {
        crate::support::driver_state(s, &first) == "KILLED"
    });
    assert_eq!(
        submission_status(gateway, &token, &second)["driverState"],
        "SUBMITTED"
    );

    successful(call(
        gateway,
        "POST",
        &format!("/{token}/v1/submissions/killall"),
        &[],
        "",
    ));
    let status = wait_for(&masters, "the rest killed", |s| {
        [&second, &third]
            .iter()
            .all(|id| crate::support::driver_state(s, id) == "KILLED")
    });
    assert_eq!(drivers(&status).len(), 3, "{status}");
    successful(call(
        gateway,
        "GET",
        &format!("/{token}/v1/submissions/readyz"),
        &[],
        "",
    ));
}

#[test]
fn what_the_gateway_refuses_changes_nothing_and_a_missing_resource_fails_its_driver() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = gateway_cluster(spark, &["--spark-rest-allow", "file:/.*\\.jar"]);
    let list = masters.list_from(1);
    let token = cluster_token();
    let gateway = masters.spark_rest[1].as_str();
    let nothing_submitted = |after: &str| {
        let status = crate::status(&list);
        assert!(drivers(&status).is_empty(), "after {after}: {status}");
    };

    // spark-submit without a token in its URL: refused as Spark's own filter refuses it.
    let bare = format!("spark://{gateway}");
    let output = spark.standalone_submit(
        &bare,
        &["--deploy-mode", "cluster", "--class", "A", "/apps/a.jar"],
    );
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("Authorization header is missing"), "{log}");
    nothing_submitted("no token");
    // What the masters refuse reaches the person: Spark's client prints an ErrorResponse.
    let output = spark.standalone_submit(
        &url(&[&gateway.to_owned()], &token),
        &[
            "--deploy-mode",
            "cluster",
            "--conf",
            "spark.muster.queue=etl",
            "--class",
            "A",
            "/apps/a.jar",
        ],
    );
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("Server responded with error") && log.contains("unknown queue `etl`"),
        "{log}"
    );
    nothing_submitted("an unknown queue");

    let create = |headers: &[&str], token: &str, body: &str| {
        call(
            gateway,
            "POST",
            &format!("{token}/v1/submissions/create"),
            headers,
            body,
        )
    };
    let body = create_body("file:/apps/a.jar", "");
    let (code, reply) = create(&["Authorization: Bearer e30.e30.e30"], "", &body);
    assert_eq!(code, 403, "{reply}");
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("Failed to verify"),
        "{reply}"
    );
    let (code, reply) = create(
        &[],
        &format!("/{token}"),
        "{\"action\": \"CreateSubmissionRequest\", ",
    );
    assert_eq!(
        (code, reply["action"].as_str()),
        (400, Some("ErrorResponse")),
        "{reply}"
    );
    let (code, reply) = create(
        &[],
        &format!("/{token}"),
        &create_body("http://elsewhere/run.sh", ""),
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("is not allowed"),
        "{reply}"
    );
    nothing_submitted("refused requests");

    // A named user's token makes the submission theirs; revoked, it submits nothing more.
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice");
    let added = Masters::client(
        &list,
        &["users", "add", "alice", "--out", alice.to_str().unwrap()],
    );
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let alices = stdout(
        &crate::support::muster()
            .args(["rest-token", "--secret-file", alice.to_str().unwrap()])
            .output()
            .unwrap(),
    );
    let alices = alices.trim();
    let waiting = create_body("file:/apps/a.jar", r#""spark.driver.cores": "8""#);
    let reply = successful(create(
        &[&format!("Authorization: Bearer {alices}")],
        "",
        &waiting,
    ));
    let id = reply["submissionId"].as_str().unwrap().to_owned();
    let status = crate::status(&list);
    assert_eq!(
        crate::support::driver(&status, &id).unwrap()["user"],
        "alice"
    );
    let revoked = Masters::client(&list, &["users", "revoke", "alice"]);
    assert!(revoked.status.success());
    let again = create_body("file:/apps/b.jar", r#""spark.driver.cores": "8""#);
    let (code, reply) = create(&[], &format!("/{alices}"), &again);
    assert_eq!(
        (code, reply["action"].as_str()),
        (403, Some("ErrorResponse")),
        "{reply}"
    );
    assert!(
        reply["message"].as_str().unwrap().contains("revoked"),
        "{reply}"
    );
    assert_eq!(drivers(&crate::status(&list)), [id.as_str()]);

    // A resource no worker has: its driver fails with the reason, it does not hang.
    let reply = successful(create(
        &[],
        &format!("/{token}"),
        &create_body("file:/no/such/app.jar", ""),
    ));
    let missing = reply["submissionId"].as_str().unwrap().to_owned();
    // Under the allowed patterns, settings that bring other code are refused.
    let javaagent = r#""spark.driver.extraJavaOptions": "-javaagent:/tmp/agent.jar""#;
    let (code, reply) = create(
        &[],
        &format!("/{token}"),
        &create_body("file:/apps/a.jar", javaagent),
    );
    assert_eq!(code, 400, "{reply}");
    let start = Instant::now();
    let failed = loop {
        let status = submission_status(gateway, &token, &missing);
        if status["driverState"] == "FAILED" {
            break status;
        }
        assert!(start.elapsed() < DEADLINE, "not failed: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("exited with code"),
        "{failed}"
    );
    let said = Masters::client(&list, &["logs", "--stderr", &missing]);
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(said.contains("/no/such/app.jar"), "{said}");
}

#[test]
fn a_submission_no_worker_could_run_is_refused_saying_why_and_one_goes_to_a_worker_with_spark() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let masters = Masters::start_with_spark_rest(&["--spark-plugin", spark.jar.to_str().unwrap()]);
    let via = masters.list_from(1);
    let worker = |name: &str, spark_home: Option<&std::path::Path>| {
        let mut command = worker_command(&masters, name, 2, &via, &[]);
        match spark_home {
            Some(home) => command.env("SPARK_HOME", home),
            None => command.env_remove("SPARK_HOME"),
        };
        Process(command.spawn().expect("muster worker starts"))
    };
    let _without = worker("worker-1", None);
    wait_for(&masters, "a worker without Spark", |s| {
        crate::support::alive_workers(s) == 1 && s["workers"][0]["spark_home"] == ""
    });
    let token = cluster_token();
    let path = format!("/{token}/v1/submissions/create");
    let body = create_body("file:/apps/a.jar", "");
    let (code, reply) = call(&masters.spark_rest[0], "POST", &path, &[], &body);
    assert_eq!(
        (code, reply["action"].as_str()),
        (400, Some("ErrorResponse")),
        "{reply}"
    );
    assert_eq!(
        reply["message"],
        "no worker can run this driver: a Spark submission runs the spark-submit of the \
         worker's SPARK_HOME, and none of the 1 ALIVE workers has one (start their agents \
         with SPARK_HOME set to a Spark)"
    );
    assert!(drivers(&crate::status(&via)).is_empty());

    // Once a worker with a Spark is ALIVE, the same submission is taken, and its driver
    // goes to that worker, not to the other, which has none.
    let _with = worker("worker-2", Some(&spark.home));
    let status = wait_for(&masters, "a worker with Spark", |s| {
        crate::support::alive_workers(s) == 2
    });
    let with_spark = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["spark_home"] != "")
        .map(|w| w["id"].clone())
        .unwrap();
    // Two, so that drivers spread over the workers would put one on each.
    let second = create_body("file:/apps/a.jar", r#""spark.app.name": "second""#);
    for body in [&body, &second] {
        let reply = successful(call(&masters.spark_rest[0], "POST", &path, &[], body));
        let id = reply["submissionId"].as_str().unwrap().to_owned();
        let placed = wait_for(&masters, "the driver placed", |s| {
            crate::support::driver(s, &id).is_some_and(|d| d["worker"].is_string())
        });
        let driver = crate::support::driver(&placed, &id).unwrap();
        assert_eq!(driver["worker"], with_spark, "{driver}");
    }
}

#[test]
fn a_submitted_driver_that_asks_for_a_gpu_is_told_which_one_is_its_own() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let masters = Masters::start_with_spark_rest(&["--spark-plugin", spark.jar.to_str().unwrap()]);
    let via = masters.list_from(1);
    let gpus = ["--resources", "gpu=GPU-x,GPU-y"];
    let _worker = Process(
        worker_command(&masters, "worker-1", 2, &via, &gpus)
            .env("SPARK_HOME", &spark.home)
            .spawn()
            .expect("muster worker starts"),
    );
    wait_for(&masters, "the worker", |s| {
        crate::support::alive_workers(s) == 1 && s["recovery_state"] == "ALIVE"
    });
    let token = cluster_token();
    let id = spark.create(
        &url(&[&masters.spark_rest[0]], &token),
        &[
            "--driver-memory",
            "1g",
            "--conf",
            "spark.driver.resource.gpu.amount=1",
            "--conf",
            "spark.executor.cores=1",
            "--conf",
            "spark.executor.memory=512m",
            &format!("--conf=spark.executor.extraJavaOptions={FAST_START}"),
            "--class",
            "SquareSums",
            spark.examples.to_str().unwrap(),
            "100",
        ],
    );
    wait_until_finished(&masters.spark_rest[0], &token, &id);
    let said = stdout(&Masters::client(&via, &["logs", "--stderr", &id]));
    assert!(
        said.lines().any(|line| line == "driver gpu GPU-x"),
        "the driver's GPU in its log: {said}"
    );
}

#[test]
fn the_submit_line_muster_dev_prints_runs_its_example_as_printed() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dev = crate::muster_dev(spark, dir.path());
    let submit = dev
        .banner
        .iter()
        .find(|line| line.starts_with("T=$(muster rest-token); "))
        .unwrap_or_else(|| panic!("no submit line in {:?}", dev.banner));
    assert!(
        !dev.banner.iter().any(|line| line.contains("not built yet")),
        "{:?}",
        dev.banner
    );
    let in_second_terminal = |command: &mut Command| {
        dev.second_terminal(command)
            .env("SPARK_HOME", &spark.home)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let output = in_second_terminal(Command::new("sh").args(["-c", submit]));
    let id = submission_id(&String::from_utf8_lossy(&output.stderr));
    finished_driver(&dev, &id);
    let said = stdout(&in_second_terminal(
        crate::support::muster().args(["logs", &id]),
    ));
    let sums = square_sums(100_000);
    assert!(said.contains(&format!("9 {}", sums[&9])), "{said}");
    // A clean run ends cleanly: its executors' going at the end is no error.
    let logged = stdout(&in_second_terminal(
        crate::support::muster().args(["logs", "--stderr", &id]),
    ));
    let errors: Vec<&str> = logged.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(dev.stop().0.success());
}
