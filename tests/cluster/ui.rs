//! The status page in a real browser (headless Chromium), where one is installed: the DOM
//! it builds holds the summary and the tables, and a screenshot is taken (written to
//! `MUSTER_UI_SCREENSHOT` when set: the book's picture comes from there). Without
//! Chromium the test says so and checks nothing more (the pages are also tested at the HTTP
//! level in `masters.rs`, and their rendering by unit tests), unless `MUSTER_REQUIRE_CHROMIUM`
//! is set, as `.ci/run` sets it: then it fails.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{DEADLINE, Masters, Process, free_port, lone_master_command, muster, stdout};

fn browser() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Runs the browser headless on `url` with `args`.
fn headless(browser: &str, url: &str, args: &[&str]) -> std::process::Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--ignore-certificate-errors",
            "--window-size=1280,900",
        ])
        .args(args)
        .arg(url)
        .output()
        .expect("the browser runs")
}

#[test]
fn the_status_page_renders_in_a_browser() {
    let Some(browser) = browser() else {
        assert!(
            std::env::var_os("MUSTER_REQUIRE_CHROMIUM").is_none(),
            "MUSTER_REQUIRE_CHROMIUM is set, but no Chromium is installed"
        );
        eprintln!("no Chromium installed: the browser test of the status page is skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let _master = Process(
        lone_master_command(&grpc, dir.path())
            .args(["--http", &http])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while !Masters::client(&grpc, &["status"]).status.success() {
        assert!(start.elapsed() < DEADLINE, "the master never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _worker = Process(
        muster()
            .args([
                "worker",
                "--masters",
                &grpc,
                "--cores",
                "4",
                "--memory",
                "4096",
            ])
            .args(["--host", "node-1", "--work-dir"])
            .arg(dir.path().join("worker"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    crate::support::set_queues(
        &grpc,
        dir.path(),
        r#"[{"name": "prod", "prior": true},
            {"name": "default", "threshold": 0.8, "max_capacity": 0.75}]"#,
    );
    let driver = stdout(&Masters::client(
        &grpc,
        &[
            "submit",
            "--name",
            "nightly-report",
            "--",
            "/bin/sleep",
            "30",
        ],
    ));
    // Wait until the driver runs on the worker.
    let start = Instant::now();
    loop {
        let status = stdout(&Masters::client(&grpc, &["status", "--json"]));
        if status.contains("RUNNING") {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the driver never ran: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let url = format!("https://{http}/");
    let dom = String::from_utf8(headless(browser, &url, &["--dump-dom"]).stdout).unwrap();
    assert!(dom.contains("<h1>Muster</h1>"), "{dom}");
    assert!(dom.contains("workers 1 ALIVE of 1"), "{dom}");
    assert!(dom.contains("drivers 1 running"), "{dom}");
    assert!(dom.contains("nightly-report"), "{dom}");
    assert!(dom.contains("max 0.75, threshold 0.8"), "{dom}");
    assert!(dom.contains(&format!(r#"href="driver/{driver}""#)), "{dom}");

    let screenshot = dir.path().join("status.png");
    let shot = headless(
        browser,
        &url,
        &[&format!("--screenshot={}", screenshot.display())],
    );
    let png = std::fs::read(&screenshot).unwrap_or_else(|e| panic!("{e}: {shot:?}"));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG image");
    if let Some(path) = std::env::var_os("MUSTER_UI_SCREENSHOT") {
        std::fs::write(path, png).unwrap();
    }
}
