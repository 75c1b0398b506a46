//! Spark applications run on Muster's executors and compute what they should.

use std::collections::BTreeMap;

use crate::support::{DEADLINE, Masters, wait_for};
use crate::{
    app, app_id_of, cluster, executors_started, executors_that_registered, spark, succeeded,
    with_every_spark,
};

#[test]
fn pyspark_pi_runs_on_as_many_muster_executors_as_it_asks_for() {
    with_every_spark(|spark| {
        let (masters, _workers) = cluster(2);
        let events = tempfile::tempdir().unwrap();
        let event_log = format!("spark.eventLog.dir=file://{}", events.path().display());
        let output = spark.run(
            &masters.list_from(1),
            &[
                "--total-executor-cores",
                "4",
                "--executor-cores",
                "1",
                "--executor-memory",
                "512m",
                // No task before all four have registered, as on Spark's standalone cluster.
                "--conf",
                "spark.scheduler.minRegisteredResourcesRatio=1.0",
                // Its events logged for Spark's history server, which the masters' page of it
                // links once it has ended.
                "--conf",
                "spark.eventLog.enabled=true",
                "--conf",
                &event_log,
                &app("pi.py"),
                "8",
            ],
        );
        let printed = succeeded(&output);
        let pi: f64 = printed
            .lines()
            .find_map(|line| line.strip_prefix("pi "))
            .unwrap_or_else(|| panic!("no estimate printed: {printed}"))
            .parse()
            .unwrap();
        assert!((pi - std::f64::consts::PI).abs() < 0.05, "pi {pi}");
        // cores.max 4 in one-core executors: four executors, on the two workers.
        let executors = executors_that_registered(&masters, &app_id_of(&output));
        assert_eq!(executors.len(), 4, "{executors:?}");
        let workers: std::collections::BTreeSet<_> = executors
            .iter()
            .map(|e| e.parent().unwrap().parent().unwrap())
            .collect();
        assert_eq!(workers.len(), 2, "spread over both workers: {executors:?}");
        // Its event log (a file, or in Spark 4 a folder) is named by its Muster id, which the
        // history server's link takes.
        let id = app_id_of(&output);
        let logged: Vec<String> = std::fs::read_dir(events.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            logged.iter().any(|name| name.contains(&id)),
            "{id}: {logged:?}"
        );
        let status = wait_for(&masters, "the application completed", |s| {
            s["completed_apps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["id"] == id.as_str())
        });
        let completed = status["completed_apps"].as_array().unwrap();
        let app = completed.iter().find(|a| a["id"] == id.as_str()).unwrap();
        assert_eq!(app["logs_events"], true, "{app}");
    });
}

#[test]
fn pyspark_word_count_agrees_with_a_count_made_here() {
    with_every_spark(|spark| {
        let (masters, _workers) = cluster(2);
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("words.txt");
        let target = dir.path().join("counts.txt");
        // 20,000 lines of words drawn from a small vocabulary, deterministically.
        let vocabulary = [
            "muster", "spark", "raft", "queue", "prior", "executor", "driver", "worker",
        ];
        let mut text = String::new();
        let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
        let mut seed: u64 = 7;
        for _ in 0..20_000 {
            for _ in 0..(seed % 5 + 1) {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let word = vocabulary[(seed >> 33) as usize % vocabulary.len()];
                *expected.entry(word).or_default() += 1;
                text.push_str(word);
                text.push(' ');
            }
            text.push('\n');
        }
        std::fs::write(&source, text).unwrap();
        let output = spark.run(
            &masters.list_from(2),
            &[
                "--executor-cores",
                "1",
                "--executor-memory",
                "512m",
                &app("wordcount.py"),
                source.to_str().unwrap(),
                target.to_str().unwrap(),
            ],
        );
        succeeded(&output);
        let counted: BTreeMap<String, u64> = std::fs::read_to_string(&target)
            .unwrap()
            .lines()
            .map(|line| {
                let (word, count) = line.split_once(' ').unwrap();
                (word.to_owned(), count.parse().unwrap())
            })
            .collect();
        let expected: BTreeMap<String, u64> = expected
            .into_iter()
            .map(|(w, c)| (w.to_owned(), c))
            .collect();
        assert_eq!(counted, expected);
        // Without cores.max, every core of both workers: four one-core executors started (the
        // job may end before the last has registered: Spark waits for none without cores.max).
        assert_eq!(executors_started(&masters, &app_id_of(&output)).len(), 4);
    });
}

#[test]
fn a_java_application_runs_on_muster_executors() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(2);
    let output = spark.run(
        &masters.list_from(1),
        &[
            "--class",
            "SquareSums",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            spark.examples.to_str().unwrap(),
            "10000",
        ],
    );
    let printed = succeeded(&output);
    let summed: BTreeMap<u64, u64> = printed
        .lines()
        .filter_map(|line| {
            let (remainder, sum) = line.split_once(' ')?;
            Some((remainder.parse().ok()?, sum.parse().ok()?))
        })
        .collect();
    assert_eq!(summed, crate::square_sums(10_000));
    let app_id = app_id_of(&output);
    assert_eq!(executors_started(&masters, &app_id).len(), 4);
    assert!(!executors_that_registered(&masters, &app_id).is_empty());
}

#[test]
fn in_cluster_mode_a_supervised_spark_driver_runs_on_a_worker_and_starts_again_when_killed() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(2);
    let list = masters.list_from(1);
    // The masters place spark-submit itself; its executors register with it where it runs.
    let submit = spark.submit(
        &list,
        &["--executor-cores", "1", "--executor-memory", "512m"],
    );
    let mut command: Vec<String> = vec![submit.get_program().to_string_lossy().into_owned()];
    command.extend(submit.get_args().map(|a| a.to_string_lossy().into_owned()));
    command.extend([app("sleepy.py"), "12".to_owned(), "1".to_owned()]);
    let environment = [
        format!("SPARK_HOME={}", spark.home.display()),
        format!("PYSPARK_PYTHON={}", spark.python.display()),
    ];
    let mut args = vec!["--supervise", "--memory", "1536", "--env", &environment[0]];
    args.extend(["--env", &environment[1], "--"]);
    args.extend(command.iter().map(String::as_str));
    let driver = crate::support::submit(&masters, &args);

    // Killed once while it runs its job (its process group: spark-submit, its JVM, Python),
    // it is started again and runs to the end.
    let first = crate::support::driver_pid(&masters, &driver);
    crate::support::wait_for(&masters, "the driver's application", |s| {
        !s["apps"].as_array().unwrap().is_empty()
    });
    let group = nix::unistd::Pid::from_raw(first as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    // A second start of a whole Spark application: longer than a status wait.
    let start = std::time::Instant::now();
    let status = loop {
        let status = crate::status(&list);
        if crate::support::driver_state(&status, &driver) == "FINISHED" {
            break status;
        }
        assert!(start.elapsed() < 3 * DEADLINE, "not finished: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let ended = crate::support::driver(&status, &driver).unwrap();
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let printed = crate::support::stdout(&Masters::client(&list, &["logs", &driver]));
    assert!(printed.contains("sum 66"), "{printed}");
}

#[test]
fn a_stage_with_a_resource_profile_runs_on_executors_of_its_size_with_their_gpus() {
    with_every_spark(|spark| {
        let masters = Masters::start();
        let _worker = crate::support::start_worker_via(
            &masters,
            "worker-1",
            4,
            &masters.list_from(1),
            &["--resources", "gpu=GPU-a,GPU-b"],
        );
        crate::support::wait_for(&masters, "the worker", |s| {
            crate::support::alive_workers(s) == 1 && s["recovery_state"] == "ALIVE"
        });
        // Stage-level scheduling needs dynamic allocation, as on standalone.
        let output = spark.run(
            &masters.list_from(1),
            &[
                "--executor-cores",
                "1",
                "--executor-memory",
                "512m",
                "--conf",
                "spark.dynamicAllocation.enabled=true",
                "--conf",
                "spark.dynamicAllocation.shuffleTracking.enabled=true",
                "--conf",
                "spark.dynamicAllocation.maxExecutors=2",
                "--conf",
                "spark.dynamicAllocation.schedulerBacklogTimeout=1s",
                &app("profiles.py"),
                "6",
            ],
        );
        let printed = succeeded(&output);
        let profile = printed
            .lines()
            .find_map(|line| line.strip_prefix("profile "))
            .expect("the profile's id");
        assert_ne!(profile, "0", "{printed}");
        // (stage, partition) -> (executor, its profile, the GPUs the task was given)
        let ran: BTreeMap<(String, u32), (String, String, String)> = printed
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let [stage @ ("own" | "gpu"), partition, executor, of, gpus] = fields[..] else {
                    return None;
                };
                let key = (stage.to_owned(), partition.parse().unwrap());
                Some((key, (executor.into(), of.into(), gpus.into())))
            })
            .collect();
        assert_eq!(ran.len(), 12, "every task of both stages: {printed}");
        let executors = |stage: &str| -> std::collections::BTreeSet<&str> {
            ran.iter()
                .filter(|((s, _), _)| s == stage)
                .map(|(_, (executor, ..))| executor.as_str())
                .collect()
        };
        for ((stage, partition), (_, of, gpus)) in &ran {
            if stage == "own" {
                assert_eq!((of.as_str(), gpus.as_str()), ("0", "-"), "task {partition}");
            } else {
                assert_eq!(of, profile, "task {partition} on the profile's executors");
                assert!(
                    ["GPU-a", "GPU-b"].contains(&gpus.as_str()),
                    "task {partition} was given one GPU: {gpus}"
                );
            }
        }
        assert!(
            executors("own").is_disjoint(&executors("gpu")),
            "the GPU stage ran on executors of its own: {ran:?}"
        );
    });
}

#[test]
fn sparks_ui_links_each_executors_output_to_the_masters_pages() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    // Masters that serve pages, which the leader links its executors' output to.
    let mut masters = Masters::stopped();
    let pages: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", crate::support::free_port()))
        .collect();
    for (id, http) in (1..=3).zip(&pages) {
        let master = masters.spawn_from(id, &crate::support::muster_binary(), &["--http", http]);
        masters.running[id - 1] = Some(master);
    }
    let _worker = crate::support::start_worker(&masters, "worker-1", 2);
    crate::support::wait_for(&masters, "the worker", |s| {
        crate::support::alive_workers(s) == 1 && s["recovery_state"] == "ALIVE"
    });
    let output = spark.run(
        &masters.list_from(1),
        &[
            "--total-executor-cores",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            // Spark's UI, where the links are.
            "--conf",
            "spark.ui.enabled=true",
            "--conf",
            "spark.ui.port=0",
            &app("logs.py"),
            "4",
        ],
    );
    let printed = succeeded(&output);
    let links: Vec<(&str, &str, &str)> = printed
        .lines()
        .filter_map(|line| {
            let mut fields = line.strip_prefix("log ")?.split(' ');
            Some((fields.next()?, fields.next()?, fields.next()?))
        })
        .collect();
    assert_eq!(
        links
            .iter()
            .map(|(_, stream, _)| *stream)
            .collect::<Vec<_>>(),
        ["stderr", "stdout", "stderr", "stdout"],
        "both streams of both executors: {printed}"
    );
    // Each link is a page of a master's, which shows the output to whoever may read it.
    let token =
        crate::support::stdout(&crate::support::muster().arg("rest-token").output().unwrap());
    let bearer = format!("Authorization: Bearer {}", token.trim());
    let mut written = String::new();
    for (executor, stream, link) in links {
        let (page, path) = link
            .strip_prefix("https://")
            .and_then(|rest| rest.split_once('/'))
            .unwrap_or_else(|| panic!("not a link to the masters' pages over TLS: {link}"));
        assert!(pages.iter().any(|p| p == page), "{link} is not a master's");
        let app = app_id_of(&output);
        assert_eq!(path, format!("logs/{app}/{executor}?stream={stream}"));
        let (head, body) = crate::support::https_request(page, &format!("/{path}"), &[&bearer])
            .unwrap_or_else(|| panic!("{link} unanswered"));
        assert!(head.starts_with("HTTP/1.1 200"), "{link}: {head}");
        if stream == "stderr" {
            written.push_str(&body);
        }
        let (head, _) = crate::support::https_request(page, &format!("/{path}"), &[]).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 401"),
            "{link} without a token: {head}"
        );
    }
    // Every task's executor logged it as run. A Python task's own output reaches its executor's
    // standard error later, through a thread of Spark's that copies what the Python workers
    // write, and one line of it has been seen missing there: one is enough to show the pages
    // carry it.
    for partition in 0..4 {
        assert!(
            written.contains(&format!("Finished task {partition}.0 in stage 0.0")),
            "task {partition} on its executor's page: {written}"
        );
    }
    assert!(
        written.contains("task-output "),
        "the tasks' own output on their executors' pages: {written}"
    );
}

#[test]
fn spark_tasks_that_ask_for_a_gpu_get_the_address_their_executor_holds() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let masters = Masters::start();
    let _worker = crate::support::start_worker_via(
        &masters,
        "worker-1",
        2,
        &masters.list_from(1),
        &["--resources", "gpu=GPU-a,GPU-b"],
    );
    crate::support::wait_for(&masters, "the worker", |s| {
        crate::support::alive_workers(s) == 1 && s["recovery_state"] == "ALIVE"
    });
    let output = spark.run(
        &masters.list_from(1),
        &[
            "--total-executor-cores",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            "--conf",
            "spark.executor.resource.gpu.amount=1",
            "--conf",
            "spark.task.resource.gpu.amount=1",
            &app("gpus.py"),
            "2",
            "8",
        ],
    );
    let printed = succeeded(&output);
    let held: BTreeMap<u64, String> = printed
        .lines()
        .filter_map(|line| line.strip_prefix("task "))
        .map(|line| {
            let (task, gpu) = line.split_once(' ').unwrap();
            (task.parse().unwrap(), gpu.to_owned())
        })
        .collect();
    assert_eq!(held.len(), 8, "{printed}");
    // Two one-GPU executors on the worker's two GPUs: every task saw one of them, and
    // between them the tasks saw both.
    let seen: std::collections::BTreeSet<&str> = held.values().map(String::as_str).collect();
    assert_eq!(
        seen,
        ["GPU-a", "GPU-b"].into(),
        "each executor its own GPU: {held:?}"
    );
}
