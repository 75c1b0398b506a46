//! `muster plan` input: parsed, then refused or planned alike by both placers.
#![no_main]

#[path = "../../crates/core/tests/placement/plan_input.rs"]
mod plan_input;

libfuzzer_sys::fuzz_target!(|data: &[u8]| plan_input::plan_json(data));
