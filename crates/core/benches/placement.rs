//! Placement benchmark.
fn main() {}
