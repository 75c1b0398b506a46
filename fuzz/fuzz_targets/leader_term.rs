//! A leader's term driven by worker, application and client messages as wire bytes.
#![no_main]

#[path = "../../crates/master/tests/hostile/leader_term.rs"]
mod leader_term;

libfuzzer_sys::fuzz_target!(|data: &[u8]| leader_term::leader_term(data));
