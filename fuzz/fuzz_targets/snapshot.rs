//! A replica's snapshot bytes: an error, or a consistent state that round trips.
#![no_main]

#[path = "../../crates/state/tests/lifecycle/snapshot_bytes.rs"]
mod snapshot_bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| snapshot_bytes::decode_hostile(data));
