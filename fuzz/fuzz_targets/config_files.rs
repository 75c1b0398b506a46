//! A master's settings file and queue file: parsed, or refused with a message.
#![no_main]

#[path = "../../crates/master/tests/hostile/config_files.rs"]
mod config_files;

libfuzzer_sys::fuzz_target!(|data: &[u8]| config_files::config_files(data));
