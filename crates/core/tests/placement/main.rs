//! Placement tests: scripts with Spark's vectors and the queue rules (`scripts`), validation,
//! the queue tree as status views show it, driver placement across seeds, and property tests
//! that hold the indexed placer equal to the literal port of Spark's loop.

mod admission;
mod equivalence;
mod fairness;
mod plan_input;
mod scripts;
mod seeds;
mod support;
mod validation;
mod views;
