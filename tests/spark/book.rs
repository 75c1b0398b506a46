//! The book's first Spark job (`docs/src/getting-started/first-spark-job.md`) as written: its
//! block of commands run by one shell in the repository's root, in a second terminal of a
//! `muster dev` cluster, with the Spark this machine has in place of the one the block's first
//! line installs.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{muster_dev, spark};

#[test]
fn the_first_spark_job_page_runs_as_written() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page =
        std::fs::read_to_string(root.join("docs/src/getting-started/first-spark-job.md")).unwrap();
    let block = page
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the page's block of commands");
    let (install, rest) = block.split_once('\n').expect("the install line first");
    assert!(install.contains("pip install pyspark=="), "{install}");
    // The venv the block would make is the one the tests have, and its `muster` this build.
    let venv = spark.python.parent().unwrap().parent().unwrap();
    let script = rest
        .replace("~/spark", &venv.display().to_string())
        .replace("$PWD/target/release/muster", env!("CARGO_BIN_EXE_muster"));
    assert!(script.contains("spark-submit"), "{script}");

    let dir = tempfile::tempdir().unwrap();
    let dev = muster_dev(spark, dir.path());
    let output = dev
        .second_terminal(Command::new("bash").args(["-c", &script]))
        .current_dir(&root)
        .env_remove("SPARK_HOME")
        // Where the block's build puts the plug-in, not the reader's cache.
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && said.lines().any(|line| line.starts_with("pi 3.1")),
        "the page's job did not print pi: {said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
