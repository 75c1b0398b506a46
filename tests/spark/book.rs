//! The book's Spark pages as written (the first Spark job, Spark on Muster in client and in
//! cluster mode, and Spark's REST gateway): each page's block of commands run by a shell in
//! the repository's root, in a second terminal of a `muster dev` cluster, with the Spark this
//! machine has in place of the one the block's first line installs.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{DEADLINE, Dev, book_page, repository_root, sh_block};
use crate::{Spark, finished_driver, muster_dev, spark, submission_id};

/// The first block of commands of the book's page at `page`, run by one `bash` in the
/// repository's root in a second terminal of a `muster dev` cluster (data under `dir`), with
/// `spark`'s venv in place of the one the block's first line makes; the cluster and what
/// the block printed.
fn run_first_block(spark: &Spark, page: &str, dir: &Path) -> (Dev, Output) {
    let page = book_page(page);
    let (install, rest) = sh_block(&page, 0)
        .split_once('\n')
        .expect("the install line first");
    assert!(install.contains("pip install pyspark=="), "{install}");
    // The venv the block would make is the one the tests have, and its `muster` this build.
    let venv = spark.python.parent().unwrap().parent().unwrap();
    let script = rest
        .replace("~/spark", &venv.display().to_string())
        .replace("$PWD/target/release/muster", env!("CARGO_BIN_EXE_muster"));
    assert!(script.contains("spark-submit"), "{script}");

    let dev = muster_dev(spark, dir);
    let output = dev
        .second_terminal(Command::new("bash").args(["-c", &script]))
        .current_dir(repository_root())
        .env_remove("SPARK_HOME")
        // Where the block's build puts the plug-in, not the reader's cache.
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (dev, output)
}

/// Whether `said` has the line pi.py prints.
fn prints_pi(said: &str) -> bool {
    said.lines().any(|line| line.starts_with("pi 3.1"))
}

#[test]
fn the_first_spark_job_page_runs_as_written() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_dev, output) = run_first_block(spark, "getting-started/first-spark-job.md", dir.path());
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && prints_pi(&said),
        "the page's job did not print pi: {said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_spark_pages_client_and_cluster_mode_run_as_written() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (dev, output) = run_first_block(spark, "user/spark.md", dir.path());
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && prints_pi(&said),
        "the client-mode job did not print pi: {said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // `muster submit` printed the cluster-mode driver's id last: spark-submit runs on a
    // worker, and its pi is in the driver's log.
    let id = said.lines().last().unwrap().trim().to_owned();
    assert!(id.starts_with("driver-"), "{said}");
    let finished = finished_driver(&dev, &id);
    assert_eq!(finished["exit_code"], 0, "{finished}");
    let logged = crate::support::stdout(
        &dev.second_terminal(Command::new(env!("CARGO_BIN_EXE_muster")).args(["logs", &id]))
            .output()
            .unwrap(),
    );
    assert!(prints_pi(&logged), "{logged}");
}

#[test]
fn the_rest_gateway_pages_block_runs_as_written() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let page = book_page("user/spark-rest.md");
    let block: Vec<&str> = sh_block(&page, 0).lines().collect();
    let dir = tempfile::tempdir().unwrap();
    let dev = muster_dev(spark, dir.path());
    // The master URL `muster dev` printed in place of the page's example addresses.
    let url = dev
        .banner
        .iter()
        .find_map(|line| line.split("--master ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no master URL in {:?}", dev.banner));
    let mut setup: Vec<String> = block[..2].iter().map(|line| line.to_string()).collect();
    assert!(setup[1].starts_with("M=spark://"), "{setup:?}");
    setup[1] = format!("M={url}");
    let first_by_id = block
        .iter()
        .position(|line| line.contains("driver-2026"))
        .expect("commands on the submitted driver");
    let bash = |lines: &[String]| {
        dev.second_terminal(Command::new("bash").args(["-c", &lines.join("\n")]))
            .current_dir(repository_root())
            .env("SPARK_HOME", &spark.home)
            .env("JAR", &spark.jar)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let submit: Vec<String> = setup
        .iter()
        .cloned()
        .chain(block[2..first_by_id].iter().map(|line| line.to_string()))
        .collect();
    let output = bash(&submit);
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");
    let id = submission_id(&log);

    let by_id: Vec<String> = block[first_by_id..]
        .iter()
        .map(|line| {
            line.split("  #")
                .next()
                .unwrap()
                .trim()
                .replace("driver-20261205...", &id)
        })
        .collect();
    let start = Instant::now();
    let state = loop {
        let shown = bash(&[by_id[0].clone()]);
        let shown = crate::support::stdout(&shown);
        if shown.contains("FINISHED") || shown.contains("FAILED") {
            break shown;
        }
        assert!(start.elapsed() < 3 * DEADLINE, "not finished: {shown}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(state.contains("FINISHED"), "{state}");
    let sums = crate::square_sums(100_000);
    let logged = crate::support::stdout(&bash(&[by_id[1].clone()]));
    assert!(logged.contains(&format!("9 {}", sums[&9])), "{logged}");
    // Killing it once it has finished answers and changes nothing.
    let kill: Vec<String> = setup.iter().cloned().chain([by_id[2].clone()]).collect();
    let killed = bash(&kill);
    assert!(
        killed.status.success(),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    let after = crate::support::stdout(&bash(&[by_id[0].clone()]));
    assert!(after.contains("FINISHED"), "{after}");
}
