//! The deploy files must not rot: the systemd units' and the compose file's command lines
//! start a real cluster here, with exactly their arguments (addresses and paths substituted
//! for this machine), and it must come up ALIVE with its workers; the compose cluster is then
//! rolled as the book's upgrading page says, command by command; the Kubernetes masters are
//! replaced only when deleted, in the order that page gives.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::{Process, alive_workers, free_port, secret_file, tls_files, wait_for_at};

fn deploy_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// Starts `muster` with `args` (the program name left out), logging to `log`.
fn start(args: &[String], log: &Path) -> Process {
    Process(
        Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(args)
            .env_clear()
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// The test machine's stand-ins for the deploy files' secret and TLS paths.
fn credential_paths(prefix: &str) -> Vec<(String, String)> {
    let tls = tls_files();
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().unwrap().display().to_string();
    vec![
        (
            format!("{prefix}secret"),
            secret_file().display().to_string(),
        ),
        (format!("{prefix}tls/cert.pem"), path(&tls.cert)),
        (format!("{prefix}tls/key.pem"), path(&tls.key)),
        (format!("{prefix}tls/ca.pem"), path(&tls.ca)),
    ]
}

/// Replaces every `from` in each argument by its `to`.
fn substitute(args: &[String], table: &[(String, String)]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            table
                .iter()
                .fold(arg.clone(), |arg, (from, to)| arg.replace(from, to))
        })
        .collect()
}

/// Waits until the masters at `list` have a leader ALIVE with `workers` ALIVE workers. If
/// they do not, the logs in `dir` and what the masters last said are printed first.
fn wait_alive(list: &str, workers: usize, dir: &Path) -> Value {
    let alive = std::panic::catch_unwind(|| {
        wait_for_at(list, "the cluster ALIVE with its workers", |status| {
            status["recovery_state"] == "ALIVE" && alive_workers(status) == workers
        })
    });
    alive.unwrap_or_else(|failed| {
        let mut logs: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("== {}", log.display());
            tail.iter().rev().for_each(|line| eprintln!("{line}"));
        }
        let status = crate::support::Masters::client(list, &["status", "--json"]);
        eprintln!("== status: {status:?}");
        std::panic::resume_unwind(failed)
    })
}

#[test]
fn the_systemd_units_start_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let exec_start = |unit: &str| -> Vec<String> {
        let text = deploy_file(unit);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .expect("an ExecStart line");
        let mut words = line.split_whitespace().map(str::to_owned);
        assert_eq!(words.next().as_deref(), Some("/usr/local/bin/muster"));
        words.collect()
    };
    let env_names = |file: &str| -> Vec<String> {
        deploy_file(file)
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('='))
            .map(|l| l.split('=').next().unwrap().to_owned())
            .collect()
    };
    let master = exec_start("systemd/muster-master.service");
    let worker = exec_start("systemd/muster-worker.service");
    let settings = dir.path().join("master.json");
    std::fs::write(&settings, deploy_file("systemd/master.json.example")).unwrap();

    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let peers = (1..=3)
        .map(|id| format!("{id}={}", addrs[id - 1]))
        .collect::<Vec<_>>()
        .join(",");
    let mut running = Vec::new();
    for id in 1..=3 {
        let env = BTreeMap::from([
            ("MUSTER_ID", id.to_string()),
            ("MUSTER_LISTEN", addrs[id - 1].clone()),
            ("MUSTER_PEERS", peers.clone()),
            ("MUSTER_HTTP", format!("127.0.0.1:{}", free_port())),
        ]);
        let mut example = env_names("systemd/master.env.example");
        example.sort();
        assert_eq!(
            example,
            env.keys().map(|k| k.to_string()).collect::<Vec<_>>(),
            "the example sets what the unit uses"
        );
        let mut table: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (format!("${{{k}}}"), v.clone()))
            .collect();
        let data = dir.path().join(format!("master-{id}"));
        table.push(("/var/lib/muster/master".into(), data.display().to_string()));
        table.push((
            "/etc/muster/master.json".into(),
            settings.display().to_string(),
        ));
        table.extend(credential_paths("/etc/muster/"));
        let args = substitute(&master, &table);
        running.push(start(&args, &dir.path().join(format!("master-{id}.log"))));
    }
    let list = addrs.join(",");
    let mut table = vec![
        ("${MUSTER_MASTERS}".to_owned(), list.clone()),
        ("${MUSTER_CORES}".to_owned(), "2".to_owned()),
        ("${MUSTER_MEMORY}".to_owned(), "2048".to_owned()),
        (
            "/var/lib/muster/worker".to_owned(),
            dir.path().join("worker").display().to_string(),
        ),
    ];
    assert_eq!(
        env_names("systemd/worker.env.example"),
        ["MUSTER_MASTERS", "MUSTER_CORES", "MUSTER_MEMORY"],
    );
    table.extend(credential_paths("/etc/muster/"));
    running.push(start(
        &substitute(&worker, &table),
        &dir.path().join("worker.log"),
    ));

    let status = wait_alive(&list, 1, dir.path());
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");
    assert_eq!(status["workers"][0]["cores"], 2, "{status}");
}

#[test]
fn the_compose_file_starts_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let compose = deploy_file("docker/docker-compose.yml");
    // Each service's `command:` is a flow sequence of quoted strings: JSON.
    let mut commands = BTreeMap::new();
    let mut service = None;
    for line in compose.lines() {
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            service = Some(name.to_owned());
        }
        if let Some(command) = line.trim().strip_prefix("command: ") {
            let args: Vec<String> = serde_json::from_str(command).unwrap();
            commands.insert(service.clone().expect("a service"), args);
        }
    }
    assert_eq!(
        commands.keys().collect::<Vec<_>>(),
        ["master-1", "master-2", "master-3", "worker-1", "worker-2"]
    );
    let mut table: Vec<(String, String)> = (1..=3)
        .map(|id| {
            (
                format!("master-{id}:7077"),
                format!("127.0.0.1:{}", free_port()),
            )
        })
        .collect();
    table.extend(credential_paths("/etc/muster/"));
    let list = (1..=3)
        .map(|i| table[i - 1].1.clone())
        .collect::<Vec<_>>()
        .join(",");
    let mut services = BTreeMap::new();
    for (name, args) in &commands {
        let mut local = table.clone();
        local.push(("0.0.0.0:8080".into(), format!("127.0.0.1:{}", free_port())));
        let data = dir.path().join(name);
        local.push(("/var/lib/muster/master".into(), data.display().to_string()));
        local.push(("/var/lib/muster/worker".into(), data.display().to_string()));
        let args = substitute(args, &local);
        let log = dir.path().join(format!("{name}.log"));
        services.insert(name.clone(), (start(&args, &log), args, log));
    }
    let status = wait_alive(&list, 2, dir.path());
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");

    // The upgrading page's rolling restart, command by command: each `docker compose up -d
    // --no-deps SERVICE` stops the service's process and starts it again, each `m ARGS` is
    // the CLI, which must succeed.
    let page = crate::support::book_page("operator/upgrading.md");
    let roll = (0..)
        .map(|n| crate::support::sh_block(&page, n))
        .find(|block| block.contains("docker compose up -d --no-deps"))
        .unwrap();
    let mut restarted = 0;
    for line in roll.lines() {
        let command = line.split("  #").next().unwrap().trim();
        if let Some(service) = command.strip_prefix("docker compose up -d --no-deps ") {
            let (process, args, log) = services.remove(service).expect("a service");
            drop(process);
            services.insert(service.to_owned(), (start(&args, &log), args, log));
            restarted += 1;
        } else if let Some(args) = command.strip_prefix("m ") {
            let args: Vec<&str> = args.split_whitespace().collect();
            let done = crate::support::Masters::client(&list, &args);
            assert!(done.status.success(), "`{command}`: {done:?}");
        } else {
            assert!(
                command.starts_with("m() {"),
                "an unknown command: {command}"
            );
        }
    }
    assert_eq!(restarted, 5, "{roll}");
    wait_alive(&list, 2, dir.path());
}

#[test]
fn the_kubernetes_masters_are_rolled_one_at_a_time_as_the_upgrading_page_says() {
    // A rolling update would replace the masters from the highest ordinal down, whichever
    // leads, without waiting for each to catch up: they are replaced only when deleted.
    let statefulset = deploy_file("kubernetes/masters.yaml");
    assert!(
        statefulset.contains("updateStrategy: {type: OnDelete}"),
        "{statefulset}"
    );
    // The page deletes each pod once, each followed by the check that its master (pod N is
    // master N+1) caught up before the next.
    let page = crate::support::book_page("operator/upgrading.md");
    let roll = (0..)
        .map(|n| crate::support::sh_block(&page, n))
        .find(|block| block.contains("kubectl delete pod"))
        .unwrap();
    let commands: Vec<&str> = roll
        .lines()
        .map(|line| line.split("  #").next().unwrap().trim())
        .filter(|command| !command.starts_with("kubectl set image"))
        .collect();
    let mut deleted = Vec::new();
    for pair in commands.chunks(2) {
        let pod: u64 = pair[0]
            .strip_prefix("kubectl delete pod muster-master-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a pod's deletion: {}", pair[0]));
        assert_eq!(
            pair.get(1).copied(),
            Some(format!("muster members caught-up {}", pod + 1).as_str()),
            "{roll}"
        );
        deleted.push(pod);
    }
    deleted.sort_unstable();
    assert_eq!(deleted, [0, 1, 2], "{roll}");
}
