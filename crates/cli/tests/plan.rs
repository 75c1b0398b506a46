//! `muster plan` on files: golden input/output pairs under `tests/plan/ok`, refused inputs
//! with their one-line errors under `tests/plan/errors`, and the book's page with the shipped
//! example.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn muster_plan(input: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("plan")
        .arg(input)
        .output()
        .expect("muster runs")
}

/// The inputs in `dir` (every `*.json` that is not an expected output), sorted.
fn inputs(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/plan")
        .join(dir);
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("golden directory")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "json")
                && !path.to_string_lossy().ends_with(".out.json")
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no inputs in {}", dir.display());
    inputs
}

fn expected(input: &Path, extension: &str) -> String {
    let path = input.with_extension(extension);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn plans_match_their_golden_outputs() {
    for input in inputs("ok") {
        let output = muster_plan(&input);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{}: {stderr}", input.display());
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            expected(&input, "out.json"),
            "{}",
            input.display()
        );
    }
}

#[test]
fn malformed_inputs_exit_2_with_one_line_naming_the_field() {
    for input in inputs("errors") {
        let output = muster_plan(&input);
        assert_eq!(output.status.code(), Some(2), "{}", input.display());
        assert!(
            output.stdout.is_empty(),
            "{}: printed a plan",
            input.display()
        );
        let expected = format!("error: {}", expected(&input, "err"));
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            expected,
            "{}",
            input.display()
        );
    }
}

#[test]
fn same_input_same_output() {
    for input in inputs("ok") {
        assert_eq!(
            muster_plan(&input).stdout,
            muster_plan(&input).stdout,
            "{}",
            input.display()
        );
    }
}

#[test]
fn reads_standard_input() {
    let input = inputs("ok").remove(0);
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["plan", "-"])
        .stdin(std::fs::File::open(&input).expect("input"))
        .stdout(Stdio::piped())
        .output()
        .expect("muster runs");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        expected(&input, "out.json")
    );
}

#[test]
fn an_unreadable_file_exits_2() {
    let output = muster_plan(Path::new("/nonexistent/snapshot.json"));
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .starts_with("error: cannot read /nonexistent/snapshot.json: ")
    );
}

#[test]
fn the_books_plan_page_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/src/user/plan.md")).unwrap();
    let block = |fence: &str| {
        page.split(fence)
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap_or_else(|| panic!("no {fence} block"))
            .to_owned()
    };
    // The page's command, run by `sh` in the repository's root with this `muster` on the
    // `PATH`.
    let muster_dir = Path::new(env!("CARGO_BIN_EXE_muster")).parent().unwrap();
    let path = format!(
        "{}:{}",
        muster_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("sh")
        .args(["-c", &block("```sh\n")])
        .current_dir(&root)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a JSON plan");
    assert!(!plan["executors"].as_array().expect("executors").is_empty());
    // What the page shows waiting is what waits.
    let shown: serde_json::Value = serde_json::from_str(&block("```json\n")).unwrap();
    assert!(
        plan["waiting"].as_array().unwrap().contains(&shown),
        "{shown} is not in {plan}"
    );
}

#[test]
fn bytes_that_are_neither_json_nor_a_saved_state_exit_2_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, [10, 0xff, 0xfe, 1, 2, 3]).unwrap();
    let output = muster_plan(&junk);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("is neither a plan input (JSON) nor a state `muster snapshot save` wrote"),
        "{said}"
    );
}
