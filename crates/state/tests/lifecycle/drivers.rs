//! Driver lifecycle: submit, kill, end.

use muster_state::commands::{DriverStateChanged, KillDriver};
use muster_state::model::DriverState;
use muster_state::{ApplyError, Op};

use crate::support::{Cluster, driver_desc, w};

#[test]
fn driver_ids_come_from_the_command_time_and_a_replicated_counter() {
    let mut c = Cluster::new();
    assert_eq!(
        c.submit_driver(driver_desc(1, 512, false)).0,
        "driver-20231031224509-0000"
    );
    assert_eq!(
        c.submit_driver(driver_desc(1, 512, false)).0,
        "driver-20231031224510-0001"
    );
}

#[test]
fn malformed_drivers_are_refused() {
    let mut c = Cluster::new();
    let submit = |desc| Op::SubmitDriver(muster_state::commands::SubmitDriver { desc });
    assert_eq!(
        c.refuse(submit(driver_desc(0, 512, false))).to_string(),
        "cores: must be at least 1"
    );
    assert_eq!(
        c.refuse(submit(driver_desc(1, 0, false))).to_string(),
        "memory_mb: must be at least 1"
    );
    let mut desc = driver_desc(1, 512, false);
    desc.queue = "nightly".into();
    assert_eq!(
        c.refuse(submit(desc)),
        ApplyError::UnknownQueue("nightly".into())
    );
}

#[test]
fn a_driver_runs_then_finishes_with_its_exit_code() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let driver = c.submit_driver(driver_desc(2, 1024, false));
    c.schedule();
    assert_eq!(c.state.drivers()[&driver].state, DriverState::Running);
    assert_eq!(c.state.workers()[&w("w1")].used.cores, 2);
    let end = |state, exit_code| {
        Op::DriverStateChanged(DriverStateChanged {
            driver: driver.clone(),
            state,
            exit_code,
        })
    };
    assert!(matches!(
        c.refuse(end(DriverState::Submitted, None)),
        ApplyError::Invalid { .. }
    ));
    assert!(matches!(
        c.refuse(end(DriverState::Running, None)),
        ApplyError::Invalid { .. }
    ));
    c.ok(end(DriverState::Finished, Some(0)));
    assert_eq!(c.state.workers()[&w("w1")].used.cores, 0);
    let completed = &c.state.completed_drivers()[0];
    assert_eq!(
        (completed.state, completed.exit_code),
        (DriverState::Finished, Some(0))
    );
    assert_eq!(
        c.refuse(end(DriverState::Failed, Some(1))),
        ApplyError::UnknownDriver(driver)
    );
}

#[test]
fn a_waiting_driver_cannot_be_reported_ended() {
    let mut c = Cluster::new();
    let driver = c.submit_driver(driver_desc(1, 512, false));
    let op = Op::DriverStateChanged(DriverStateChanged {
        driver,
        state: DriverState::Failed,
        exit_code: Some(1),
    });
    assert!(matches!(c.refuse(op), ApplyError::Conflict(_)));
}

#[test]
fn killing_a_driver_frees_its_worker_and_names_it() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let running = c.submit_driver(driver_desc(1, 512, false));
    c.schedule();
    let waiting = c.submit_driver(driver_desc(1, 512, false));
    let response = c.ok(Op::KillDriver(KillDriver {
        id: running.clone(),
    }));
    assert_eq!(
        response.effects.ended_drivers,
        [(running.clone(), Some(w("w1")), DriverState::Killed)]
    );
    let response = c.ok(Op::KillDriver(KillDriver {
        id: waiting.clone(),
    }));
    assert_eq!(
        response.effects.ended_drivers,
        [(waiting, None, DriverState::Killed)]
    );
    assert_eq!(c.state.workers()[&w("w1")].used.cores, 0);
    assert_eq!(
        c.refuse(Op::KillDriver(KillDriver {
            id: running.clone()
        })),
        ApplyError::UnknownDriver(running)
    );
}

#[test]
fn a_driver_its_worker_gave_up_is_relaunched_when_supervised() {
    let mut c = Cluster::new();
    c.worker("w1", 4, 4096);
    let supervised = c.submit_driver(driver_desc(1, 512, true));
    let plain = c.submit_driver(driver_desc(1, 512, false));
    c.schedule();
    let lost = |driver| {
        Op::DriverStateChanged(DriverStateChanged {
            driver,
            state: DriverState::Relaunching,
            exit_code: None,
        })
    };
    let response = c.ok(lost(supervised.clone()));
    let [(old, new)] = response.effects.relaunched_drivers.as_slice() else {
        panic!("one relaunch: {response:?}");
    };
    assert_eq!(old, &supervised);
    assert_eq!(c.state.drivers()[new].state, DriverState::Submitted);
    c.ok(lost(plain.clone()));
    let ended = c
        .state
        .completed_drivers()
        .iter()
        .find(|d| d.id == plain)
        .unwrap();
    assert_eq!(ended.state, DriverState::Error);
    assert_eq!(c.state.workers()[&w("w1")].used.cores, 0);
}
