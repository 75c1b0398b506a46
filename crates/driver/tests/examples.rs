//! The example job files in `deploy/examples` read as valid job files.

use muster_driver::spec::JobFile;

#[test]
fn every_example_job_file_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            JobFile::read(&path).unwrap_or_else(|e| panic!("{e}"));
            read += 1;
        }
    }
    assert!(read >= 3, "the examples are there");
}
