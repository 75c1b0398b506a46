//! Admission: a burst of cluster-mode drivers on a cluster with no configuration never
//! wedges it, since each queue's drivers hold at most its driver share; gangs are granted
//! all of their minimum or nothing (in one queue and in sibling queues), a gang that waits
//! keeps the room left for it through a leader's SIGKILL, a driver starts only with room for
//! its application's gang or first executor, and a gang that waits past its timeout is placed as
//! any application or fails, by its queue's style.

use std::time::Duration;

use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, driver_state, start_worker, stdout, wait_for, wait_within,
};

/// How long ten jobs of 24 task-seconds each may take on 8 cores, two at a time at the
/// least, with room to spare on a loaded machine.
const BURST_DEADLINE: Duration = Duration::from_secs(240);

fn drivers_in<'s>(status: &'s Value, ids: &[String], state: &str) -> Vec<&'s Value> {
    status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| ids.iter().any(|id| d["id"] == id.as_str()) && d["state"] == state)
        .collect()
}

/// Two 4-core workers, ALIVE.
fn cluster() -> (Masters, [crate::support::Process; 2]) {
    let masters = Masters::start();
    let workers = [
        start_worker(&masters, "w1", 4),
        start_worker(&masters, "w2", 4),
    ];
    wait_for(&masters, "two workers", |s| {
        crate::support::alive_workers(s) == 2
    });
    (masters, workers)
}

/// Submits ten cluster-mode drivers at once, each running the job file `resources` and
/// `run` make, with one core and 64 MB: the nightly burst of a workflow scheduler. Their
/// ids.
fn burst(masters: &Masters, resources: &str, tasks: u32, task_ms: u64) -> Vec<String> {
    let file = job_file(masters, "burst", "default", resources, tasks, task_ms);
    let submit = [
        "submit",
        "--cores",
        "1",
        "--memory",
        "64",
        "--job",
        file.to_str().unwrap(),
    ];
    let list = masters.list_from(1);
    let ids: Vec<String> = std::thread::scope(|scope| {
        let submitting: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| stdout(&Masters::client(&list, &submit))))
            .collect();
        submitting.into_iter().map(|s| s.join().unwrap()).collect()
    });
    assert_eq!(ids.len(), 10);
    ids
}

/// Writes job file `NAME.toml` to the masters' directory: application `name` of `queue`
/// with `resources`, running one stage of `tasks` tasks that each sleep `task_ms`.
fn job_file(
    masters: &Masters,
    name: &str,
    queue: &str,
    resources: &str,
    tasks: u32,
    task_ms: u64,
) -> std::path::PathBuf {
    let file = masters.dir.path().join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            r#"name = "{name}"
queue = "{queue}"
[resources]
{resources}
[[jobs]]
name = "tasks"
  [[jobs.stages]]
  name = "s"
  tasks = {tasks}
  run = {{ builtin = "sleep", ms = {task_ms} }}
"#
        ),
    )
    .unwrap();
    file
}

/// Waits until every driver of `ids` has ended, and checks each FINISHED with exit 0.
fn all_finish(masters: &Masters, ids: &[String]) {
    let list = masters.list_from(1);
    let status = wait_within(&list, "every driver FINISHED", BURST_DEADLINE, |s| {
        ids.iter()
            .all(|id| driver_state(s, id) != "SUBMITTED" && driver_state(s, id) != "RUNNING")
    });
    for id in ids {
        let driver = crate::support::driver(&status, id).unwrap();
        assert_eq!(
            (driver["state"].as_str(), driver["exit_code"].as_i64()),
            (Some("FINISHED"), Some(0)),
            "{driver}"
        );
    }
}

#[test]
fn a_burst_of_cluster_mode_drivers_all_finish_on_a_cluster_with_no_configuration() {
    let (masters, _workers) = cluster();
    // Each job asks for two one-core executors and runs 8 tasks of 3 s.
    let resources = "cores_max = 2\nexecutor_cores = 1\nexecutor_memory_mb = 64";
    let ids = burst(&masters, resources, 8, 3000);

    // Drivers take at most half the cores (the default driver share); those held back say
    // so, and the applications of those running get executors. Each application names the
    // driver that runs it (its page links it) once it has attached to the leader: its
    // registration is in the log a moment before.
    let status = wait_for(
        &masters,
        "executors beside the running drivers, whose applications name them",
        |s| {
            let apps = s["apps"].as_array().unwrap();
            let executors = apps
                .iter()
                .flat_map(|a| a["executors"].as_array().unwrap())
                .count();
            let named = apps
                .iter()
                .all(|a| ids.iter().any(|id| a["driver"] == id.as_str()));
            drivers_in(s, &ids, "RUNNING").len() == 4 && executors > 0 && named
        },
    );
    let held_back = drivers_in(&status, &ids, "SUBMITTED");
    assert_eq!(held_back.len(), 6, "{status}");
    assert!(
        held_back.iter().all(|d| d["waiting"]
            == "drivers of queue `default` hold 4 of 4 cores allowed (driver share 0.5)"),
        "{held_back:?}"
    );

    all_finish(&masters, &ids);
}

#[test]
fn a_burst_of_drivers_whose_executors_are_larger_than_what_drivers_leave_all_finish() {
    let (masters, _workers) = cluster();
    // Executors of 3 cores on workers of 4: four drivers, two to a worker, would leave 2
    // cores on each, too few for any executor, so a driver starts only beside room for its
    // first executor.
    let resources = "cores_max = 3\nexecutor_cores = 3\nexecutor_memory_mb = 64";
    let ids = burst(&masters, resources, 3, 1000);
    let status = wait_for(&masters, "a driver's application with its executor", |s| {
        s["apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| !a["executors"].as_array().unwrap().is_empty())
    });
    assert!(drivers_in(&status, &ids, "RUNNING").len() <= 2, "{status}");
    let waiting = drivers_in(&status, &ids, "SUBMITTED");
    assert!(
        waiting
            .iter()
            .all(|d| d["waiting"].as_str().is_some_and(|w| {
                w == "the driver starts where its application's first executor fits beside it: \
                  none does now"
                    || w.starts_with("no ALIVE worker has 1 core, 64 MB free")
            })),
        "{waiting:?}"
    );
    all_finish(&masters, &ids);
}

#[test]
fn of_two_gangs_that_cannot_both_fit_one_is_granted_all_of_its_minimum_and_the_other_keeps_room() {
    let (mut masters, _workers) = cluster();
    two_gangs(&mut masters, ["default", "default"], true);
}

#[test]
fn of_two_gangs_in_sibling_queues_one_is_granted_all_of_its_minimum_and_the_other_keeps_room() {
    // Two queues guaranteed half of the cluster each, either may take all of it.
    let (mut masters, _settings) = crate::support::configured_masters(
        "{}",
        r#"[{"name": "default", "capacity": 0}, {"name": "a", "capacity": 0.5},
            {"name": "b", "capacity": 0.5}]"#,
    );
    let _workers = [
        start_worker(&masters, "w1", 4),
        start_worker(&masters, "w2", 4),
    ];
    wait_for(&masters, "two workers", |s| {
        crate::support::alive_workers(s) == 2
    });
    two_gangs(&mut masters, ["a", "b"], false);
}

/// Two gangs, each needing 5 of the 8 cores at once and running 5 tasks of 15 s, submitted
/// together to `queues`: one is granted its 5 and the other none, keeping the 3 cores left,
/// and then runs; with `kill_leader`, the leader is SIGKILLed while room is kept, and newer
/// work gets none of it.
fn two_gangs(masters: &mut Masters, queues: [&str; 2], kill_leader: bool) {
    // Each needs 5 of the 8 cores at once, and runs 5 tasks of 15 s.
    let runs: Vec<crate::support::Process> = ["first", "second"]
        .into_iter()
        .zip(queues)
        .map(|(name, queue)| {
            let resources =
                "cores_max = 5\nexecutor_cores = 1\nexecutor_memory_mb = 64\nmin_executors = 5";
            let file = job_file(masters, name, queue, resources, 5, 15_000);
            crate::support::Process(
                crate::support::muster()
                    .args(["job", "run"])
                    .arg(&file)
                    .env("MUSTER_MASTERS", masters.list_from(1))
                    .stdout(std::process::Stdio::null())
                    .stderr(
                        std::fs::File::create(masters.dir.path().join(format!("{name}.log")))
                            .unwrap(),
                    )
                    .spawn()
                    .expect("muster job run starts"),
            )
        })
        .collect();
    // While both are active, one holds its 5 executors and the other none, with the 3 cores
    // left kept for it.
    let executors = |app: &Value| app["executors"].as_array().unwrap().len();
    let one_granted_one_keeping = |s: &Value| {
        let apps = s["apps"].as_array().unwrap();
        let waiting = apps.iter().find(|a| executors(a) == 0);
        apps.len() >= 2
            && apps.iter().any(|a| executors(a) == 5)
            && waiting.is_some_and(|w| {
                let kept: u64 = s["kept"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|k| k["owner"] == w["id"])
                    .map(|k| k["cores"].as_u64().unwrap())
                    .sum();
                kept == 3
            })
    };
    let status = wait_for(masters, "one gang granted, the other keeping room", |s| {
        one_granted_one_keeping(s)
    });
    let waiting = status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| executors(a) == 0)
        .unwrap();
    assert_eq!(
        waiting["waiting"],
        "a gang of 5 executors starts when all fit at once: room for 3 is kept for it as it frees",
        "{status}"
    );
    assert_eq!(waiting["min_executors"], 5);
    let mut list = masters.list_from(1);
    let workers = stdout(&Masters::client(&list, &["workers"]));
    assert!(
        workers.contains(&format!(
            "MB for {} (a waiting gang)",
            waiting["id"].as_str().unwrap()
        )),
        "{workers}"
    );

    // The leader dies while room is kept: the next keeps the same.
    if kill_leader {
        let leader = masters.leader(0);
        masters.running[leader as usize - 1].take().unwrap().crash();
        masters.leader(leader);
        list = masters.list_from(leader as usize % 3 + 1);
        wait_within(&list, "the same gang keeping room", DEADLINE, |s| {
            s["recovery_state"] == "ALIVE" && one_granted_one_keeping(s)
        });
    }
    // Newer work gets none of it.
    let (_newer, newer, _out) = crate::support::app_run(
        masters,
        &[
            "--name",
            "newer",
            "--executor-cores",
            "1",
            "--cores-max",
            "1",
            "--executor-memory",
            "64",
            "--",
            "/bin/sleep",
            "600",
        ],
    );
    let status = wait_within(&list, "the newer app waiting", DEADLINE, |s| {
        crate::support::app(s, &newer).is_some_and(|a| a["waiting"].is_string())
    });
    assert_eq!(
        executors(crate::support::app(&status, &newer).unwrap()),
        0,
        "{status}"
    );

    // No gang ever holds part of its minimum, and then the second runs: both finish (the
    // newer app runs on).
    let gangs_finished = |s: &Value| {
        s["completed_apps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "FINISHED")
            .count()
    };
    wait_within(&list, "both gangs finished", Duration::from_secs(90), |s| {
        for app in s["apps"].as_array().unwrap() {
            let held = executors(app);
            assert!(
                app["min_executors"] != 5 || held == 0 || held == 5,
                "a gang holds part of its minimum: {s}"
            );
        }
        gangs_finished(s) == 2
    });
    for mut run in runs {
        assert!(run.exited("muster job run").success());
    }
}

#[test]
fn a_burst_of_drivers_whose_applications_are_gangs_all_finish() {
    let (masters, _workers) = cluster();
    // Each application needs 5 of the 8 cores at once: four drivers started together would
    // leave no room for any gang, so a driver starts only beside room for its gang.
    let resources = "cores_max = 5\nexecutor_cores = 1\nexecutor_memory_mb = 64\nmin_executors = 5";
    let ids = burst(&masters, resources, 5, 1000);
    let status = wait_for(
        &masters,
        "a gang driver waiting beside a running one",
        |s| {
            !drivers_in(s, &ids, "RUNNING").is_empty()
                && !drivers_in(s, &ids, "SUBMITTED").is_empty()
        },
    );
    let waiting = drivers_in(&status, &ids, "SUBMITTED");
    assert!(
        waiting
            .iter()
            .all(|d| d["waiting"].as_str().is_some_and(|w| {
                w.starts_with(
                    "its application's gang of 5 executors and the driver start when all fit",
                )
            })),
        "{waiting:?}"
    );
    all_finish(&masters, &ids);
}

#[test]
fn a_gang_that_waits_past_its_timeout_is_placed_as_any_app_or_fails_by_its_queues_style() {
    // The masters' timeout is soft, after 2 s; queue `strict` fails its gangs after 2 s.
    let (masters, _settings) = crate::support::configured_masters(
        r#"{"gang_timeout_s": 2}"#,
        r#"[{"name": "default"}, {"name": "strict", "gang_timeout_s": 2, "gang_style": "hard"}]"#,
    );
    let _worker = start_worker(&masters, "w1", 4);
    wait_for(&masters, "the worker", |s| {
        crate::support::alive_workers(s) == 1
    });
    let sleeper = |name: &str, queue: &str, cores_max: &str, min: Option<&str>| {
        let mut args = vec![
            "--name",
            name,
            "--queue",
            queue,
            "--executor-cores",
            "1",
            "--executor-memory",
            "64",
            "--cores-max",
            cores_max,
        ];
        if let Some(min) = min {
            args.extend(["--min-executors", min]);
        }
        args.extend(["--", "/bin/sleep", "600"]);
        crate::support::app_run(&masters, &args)
    };
    // Three of the four cores are held for as long as the test runs.
    let (_holder, holder, _out) = sleeper("holder", "default", "3", None);
    wait_for(&masters, "the holder's executors", |s| {
        crate::support::running_executors(s, &holder).len() == 3
    });
    let (_soft, soft, _out) = sleeper("soft", "default", "4", Some("4"));
    let status = wait_for(&masters, "the soft gang placed as any app", |s| {
        crate::support::app(s, &soft)
            .is_some_and(|a| !a["executors"].as_array().unwrap().is_empty())
    });
    let app = crate::support::app(&status, &soft).unwrap();
    assert_eq!(app["executors"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(app["min_executors"], Value::Null, "{status}");
    let timed_out = app["gang_timed_out"].as_str().unwrap();
    assert!(
        timed_out.starts_with("its gang of 4 executors did not fit within ")
            && timed_out.ends_with(": placed as any application since (gang_style soft)"),
        "{timed_out}"
    );

    let (mut strict_run, strict, strict_out) = sleeper("strict", "strict", "4", Some("4"));
    let status = wait_for(&masters, "the strict gang failed", |s| {
        s["completed_apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == strict.as_str())
    });
    let ended = status["completed_apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == strict.as_str())
        .unwrap();
    assert_eq!(ended["state"], "FAILED", "{status}");
    assert!(
        ended["gang_timed_out"]
            .as_str()
            .unwrap()
            .ends_with("failed (gang_style hard)"),
        "{status}"
    );
    // Its client hears it failed, and ends.
    strict_run.exited("muster app run");
    let printed: Vec<String> = std::io::BufRead::lines(strict_out)
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        printed.last().map(String::as_str),
        Some(format!("application {strict} FAILED").as_str()),
        "{printed:?}"
    );
}
