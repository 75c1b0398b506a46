//! Spark's external shuffle service on a worker (`muster worker --shuffle-service`): executors
//! given back by dynamic allocation leave their shuffle output served; the service through its
//! own death, its agent's restarts (adopted when its settings hold, replaced when they changed,
//! its registrations kept either way), `spark.authenticate`, and a work dir with spaces.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, Process, free_port, muster_binary, processes_with_args, signal, wait_for,
    wait_for_text, worker_command, worker_command_at,
};
use crate::{Spark, SubmitRun, app, running, spark, status, succeeded, with_every_spark};

/// The shuffle service as the masters' status shows the only worker's.
fn service(status: &Value) -> Value {
    status["workers"][0]["shuffle_service"].clone()
}

/// The JVMs of the services on `port` on this machine (their wrapper shells name the port
/// too): a service left by another run on another port is not this test's.
fn service_pids(port: &str) -> Vec<i32> {
    processes_with_args(&[&format!("-Dspark.shuffle.service.port={port}")])
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "java")
        })
        .collect()
}

/// `shuffled.py` with dynamic allocation on the shuffle service, after `settings`, once it
/// has run its shuffle; it reads the shuffle again once the file `go` exists.
fn shuffled(spark: &Spark, list: &str, settings: &[&str], go: &Path) -> SubmitRun {
    let mut args = vec![
        "--executor-cores",
        "1",
        "--conf",
        "spark.shuffle.service.enabled=true",
        "--conf",
        "spark.dynamicAllocation.enabled=true",
        "--conf",
        "spark.dynamicAllocation.executorIdleTimeout=1s",
        "--conf",
        "spark.dynamicAllocation.maxExecutors=2",
    ];
    args.extend(settings);
    let script = app("shuffled.py");
    args.extend([script.as_str(), "1000", go.to_str().unwrap()]);
    SubmitRun::start(spark, list, &args, "shuffled")
}

/// Lets `shuffled.py` read its shuffle again, and asserts it found every map output served:
/// no map partition ran twice, the sums are right and no task failed.
fn read_again_from_the_service(run: SubmitRun, go: &Path) {
    std::fs::write(go, "").unwrap();
    let output = run.wait();
    let printed = succeeded(&output);
    assert!(printed.contains("computed 4"), "{printed}");
    for remainder in 0..10 {
        let line = format!("{remainder} {}", 100 * remainder + 49_500);
        assert!(printed.lines().any(|l| l == line), "{line}: {printed}");
    }
    assert_eq!(crate::faults::failed_tasks(&output), Vec::<String>::new());
}

/// The secret of `spark.authenticate`, in a file only its owner reads.
const SPARK_SECRET: &str = "the secret shared by the applications and the service";

#[test]
fn an_authenticating_service_in_a_work_dir_with_spaces_serves_output_of_executors_given_back() {
    with_every_spark(|spark| {
        let masters = Masters::start();
        let port = free_port().to_string();
        let secret_file = masters.dir.path().join("spark secret");
        std::fs::write(&secret_file, SPARK_SECRET).unwrap();
        let mut permissions = std::fs::metadata(&secret_file).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
        std::fs::set_permissions(&secret_file, permissions).unwrap();
        let flags = [
            "--shuffle-service",
            "--shuffle-service-port",
            &port,
            "--shuffle-service-secret-file",
            secret_file.to_str().unwrap(),
        ];
        let work_dir = masters.dir.path().join("work dir of \"worker 1\"");
        let _worker = Process(
            worker_command_at(
                &muster_binary(),
                &masters,
                "worker-1",
                &work_dir,
                2,
                &masters.list_from(1),
                &flags,
            )
            .env("SPARK_HOME", &spark.home)
            .spawn()
            .unwrap(),
        );
        let ready = wait_for(&masters, "the worker with its shuffle service", |s| {
            s["recovery_state"] == "ALIVE" && service(s)["ready"] == true
        });
        assert_eq!(service(&ready)["port"].to_string(), port);

        let list = masters.list_from(1);
        let go = masters.dir.path().join("go");
        let secret = format!("spark.authenticate.secret={SPARK_SECRET}");
        let authenticated = [
            "--conf",
            "spark.authenticate=true",
            "--conf",
            secret.as_str(),
        ];
        let run = shuffled(spark, &list, &authenticated, &go);
        let app_id = status(&list)["apps"][0]["id"].as_str().unwrap().to_owned();
        // Idle, the executors go, shuffle output and all: no shuffle tracking holds them.
        wait_for(&masters, "every executor given back", |s| running(s) == 0);
        let data = work_dir.join("local").join(&app_id);
        assert!(data.is_dir(), "the executors wrote into {}", data.display());
        // New executors read the map output from the service.
        read_again_from_the_service(run, &go);
        // Once the application ended, its worker removes its data.
        let deadline = Instant::now() + DEADLINE;
        while data.exists() {
            assert!(
                Instant::now() < deadline,
                "{} is still there",
                data.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

#[test]
fn a_workers_shuffle_service_starts_again_when_it_dies_and_lives_as_long_as_agents_run_it() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let masters = Masters::start();
    let port = free_port().to_string();
    // An agent that leaves its work running when it stops, with the service or without.
    let agent = |with_service: bool| {
        let service = ["--shuffle-service", "--shuffle-service-port", &port];
        let args: &[&str] = if with_service { &service } else { &[] };
        let mut command = worker_command(&masters, "worker-1", 2, &masters.list_from(1), args);
        command
            .env("SPARK_HOME", &spark.home)
            .env_remove("MUSTER_STOP_WORK_ON_EXIT");
        Process(command.spawn().unwrap())
    };
    let mut first = agent(true);
    wait_for(&masters, "the shuffle service up", |s| {
        service(s)["ready"] == true
    });
    let [killed] = service_pids(&port)[..] else {
        panic!("one shuffle service: {:?}", service_pids(&port));
    };

    // Killed, it is started again, and says so.
    signal(killed as u32, Signal::SIGKILL);
    let again = wait_for(&masters, "the shuffle service up again", |s| {
        service(s)["ready"] == true && service(s)["restarts"] == 1
    });
    let listed = Masters::client(&masters.list_from(1), &["workers"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(&format!(":{port} up, restarted once")),
        "{listed}"
    );
    let [restarted] = service_pids(&port)[..] else {
        panic!("one shuffle service: {:?}", service_pids(&port));
    };
    assert_ne!(restarted, killed, "{again}");

    // The agent stops and the next one takes the same service over.
    signal(first.pid(), Signal::SIGTERM);
    assert!(first.exited("the agent after SIGTERM").success());
    assert_eq!(service_pids(&port), [restarted]);
    let mut second = agent(true);
    wait_for_text(
        &masters.dir.path().join("worker-1.log"),
        "the next agent adopting the service",
        |log| log.contains("adopted") && log.contains("registered with the leader"),
    );
    wait_for(&masters, "the adopted service up", |s| {
        service(s)["ready"] == true
    });
    assert_eq!(service_pids(&port), [restarted]);
    // The next agent runs none: it stops the one it finds.
    signal(second.pid(), Signal::SIGTERM);
    assert!(second.exited("the agent after SIGTERM").success());
    let _third = agent(false);
    let deadline = Instant::now() + DEADLINE;
    while !service_pids(&port).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the service outlived an agent without one"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for(&masters, "the worker without a shuffle service", |s| {
        s["workers"][0]["state"] == "ALIVE" && service(s).is_null()
    });
}

#[test]
fn an_agent_with_other_service_settings_runs_its_own_which_serves_what_was_registered_before() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let masters = Masters::start();
    let list = masters.list_from(1);
    // An agent that leaves its work running when it stops, with these service settings.
    let agent = |port: &str, options: &str| {
        let service = ["--shuffle-service", "--shuffle-service-port", port];
        let mut command = worker_command(&masters, "worker-1", 2, &list, &service);
        command
            .env("SPARK_HOME", &spark.home)
            .env("SPARK_SHUFFLE_OPTS", options)
            .env_remove("MUSTER_STOP_WORK_ON_EXIT");
        Process(command.spawn().unwrap())
    };
    // Up on `port`, as the only service, and not `before`: its pid.
    let up_instead_of = |before: i32, port: &str| {
        let number: u64 = port.parse().unwrap();
        wait_for(&masters, "the agent's own service up", |s| {
            matches!(service_pids(port)[..], [one] if one != before)
                && service(s)["ready"] == true
                && service(s)["port"] == number
        });
        let [pid] = service_pids(port)[..] else {
            panic!("one shuffle service: {:?}", service_pids(port));
        };
        pid
    };
    let port = free_port().to_string();
    let mut first = agent(&port, "");
    let first_service = up_instead_of(0, &port);

    // Executors register with the service, write their shuffle output and are given back.
    let go = masters.dir.path().join("go");
    let run = shuffled(spark, &list, &[], &go);
    wait_for(&masters, "every executor given back", |s| running(s) == 0);

    // The next agent runs the service with other settings: the old one goes, its own comes
    // on the same port and serves the output of the executors that registered with the old.
    signal(first.pid(), Signal::SIGTERM);
    assert!(first.exited("the agent after SIGTERM").success());
    let threads = "-Dspark.shuffle.io.serverThreads=2";
    let mut second = agent(&port, threads);
    let second_service = up_instead_of(first_service, &port);
    let command_line = std::fs::read(format!("/proc/{second_service}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&command_line).contains(threads),
        "{}",
        String::from_utf8_lossy(&command_line)
    );
    read_again_from_the_service(run, &go);

    // On another port, the next agent's service is found there.
    signal(second.pid(), Signal::SIGTERM);
    assert!(second.exited("the agent after SIGTERM").success());
    let other_port = free_port().to_string();
    let mut third = agent(&other_port, threads);
    let third_service = up_instead_of(second_service, &other_port);
    assert_eq!(service_pids(&port), Vec::<i32>::new());
    signal(third.pid(), Signal::SIGTERM);
    assert!(third.exited("the agent after SIGTERM").success());
    signal(third_service as u32, Signal::SIGKILL);
}
