//! Settings and queue files as bytes, shared by the property tests in `main.rs` and the fuzz
//! target `config_files` (`fuzz/`): parsed, or refused with a message, never a panic.

use std::path::Path;

use muster_leader::config::{MasterFile, parse_json, parse_queues};

/// A settings file and a queue file with these contents: parsed, or refused with a message.
pub fn config_files(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let path = Path::new("hostile.json");
    match parse_json::<MasterFile>(&text, path) {
        Ok(file) => {
            // Out-of-range settings are refused here, not at first use.
            let _ = file.leader(None, None, None);
            let _ = file.state();
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    if let Err(error) = parse_queues(&text, path) {
        assert!(!error.to_string().is_empty());
    }
}
