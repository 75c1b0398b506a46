//! `muster plan` input as bytes, shared by the property test below and the fuzz target
//! `plan_json` (`fuzz/`): whatever parses is either refused with a message by both placers
//! or planned by both the same way (and its preemption decided the same way twice), and
//! nothing panics.

use muster_core::{Snapshot, spark_reference};

/// Above this many cores in the cluster, Spark's one-core-at-a-time loop is too slow to run
/// on every input.
const REFERENCE_CORES: u64 = 4096;

/// Parses `bytes` as a `muster plan` snapshot and runs one pass with each placer.
pub fn plan_json(bytes: &[u8]) {
    let Ok(snapshot) = serde_json::from_slice::<Snapshot>(bytes) else {
        return;
    };
    let plan = muster_core::schedule(&snapshot);
    let cores: u64 = snapshot
        .workers
        .iter()
        .map(|w| u64::from(w.capacity.cores))
        .sum();
    match &plan {
        Err(error) => assert!(!error.to_string().is_empty()),
        Ok(_) if cores > REFERENCE_CORES => return,
        Ok(_) => {}
    }
    assert_eq!(
        plan,
        spark_reference::schedule(&snapshot),
        "the placers differ"
    );
    if let (Ok(_), Some(settings)) = (&plan, &snapshot.preemption) {
        let preemption = muster_core::preempt::dry_run(&snapshot, settings);
        match &preemption {
            Ok(_) => assert_eq!(
                preemption,
                muster_core::preempt::dry_run(&snapshot, settings)
            ),
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::plan_json;

    /// The snapshots `muster plan`'s golden tests read, as the starting points of mutations.
    fn golden() -> Vec<Vec<u8>> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/tests/plan/ok");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("the golden plan inputs")
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .filter(|path| !path.to_string_lossy().ends_with(".out.json"))
            .map(|path| std::fs::read(path).expect("a golden input"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        files
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Golden inputs with bytes overwritten: most no longer parse, some parse with other
        /// numbers or names, and those must plan consistently.
        #[test]
        fn mutated_plan_inputs_are_refused_or_planned_alike(
            pick in any::<prop::sample::Index>(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), b'0'..=b'9'), 1..4),
        ) {
            let inputs = golden();
            let mut bytes = pick.get(&inputs).clone();
            for (at, digit) in flips {
                let at = at.index(bytes.len());
                bytes[at] = digit;
            }
            plan_json(&bytes);
        }
    }
}
