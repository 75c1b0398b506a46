//! The `muster` command.
fn main() {}
