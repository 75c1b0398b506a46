//! Placement tests: Spark's vectors, the queue rules, validation, and property tests that hold
//! the indexed placer equal to the literal port of Spark's loop.

mod equivalence;
mod queues;
mod support;
mod validation;
mod vectors;
