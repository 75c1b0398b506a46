//! The checks that refuse a malformed snapshot before any placement is attempted, each
//! naming the offending field.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;

use foldhash::fast::FixedState;

use super::queue::{NotALeaf, is_known, validate_queues};
use super::{Snapshot, Worker};
use crate::ids::QueueName;
use crate::resources::{ResourceAmounts, validate_amounts};

/// Why a snapshot was refused: the offending field's path and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InputError {
    /// Path of the field, e.g. `apps[2].queue`.
    pub field: String,
    /// What is wrong, e.g. ``unknown queue `batch` ``.
    pub message: String,
}

/// Field names are written only when something is refused: validation runs on every pass.
pub(super) fn refuse<T>(
    field: impl fmt::Display,
    message: impl Into<String>,
) -> Result<T, InputError> {
    Err(InputError {
        field: field.to_string(),
        message: message.into(),
    })
}

/// Refuses a zero `value` for `field`.
///
/// # Errors
///
/// `field: must be at least 1`.
pub fn positive<N: PartialEq + Default>(
    field: impl fmt::Display,
    value: N,
) -> Result<(), InputError> {
    if value == N::default() {
        refuse(field, "must be at least 1")
    } else {
        Ok(())
    }
}

pub(super) fn fraction(field: impl fmt::Display, value: f64) -> Result<(), InputError> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        refuse(field, format!("must be in (0, 1], got {value}"))
    }
}

/// Checks custom resource amounts: names not empty, amounts at least 1.
///
/// # Errors
///
/// The first offending amount, as `field.name`.
pub fn resource_amounts(
    field: impl fmt::Display,
    amounts: &ResourceAmounts,
) -> Result<(), InputError> {
    for (name, &amount) in amounts {
        if name.is_empty() {
            return refuse(field, "resource names must not be empty");
        }
        positive(format_args!("{field}.{name}"), amount)?;
    }
    Ok(())
}

pub(super) fn unique<'a, T: Eq + Hash + AsRef<str> + fmt::Display + 'a>(
    what: &str,
    ids: impl Iterator<Item = &'a T>,
    field: impl Fn(usize) -> String,
) -> Result<HashSet<&'a T, FixedState>, InputError> {
    let mut seen = HashSet::with_capacity_and_hasher(ids.size_hint().0, FixedState::default());
    for (i, id) in ids.enumerate() {
        if id.as_ref().is_empty() {
            return refuse(field(i), format!("{what} must not be empty"));
        }
        if !seen.insert(id) {
            return refuse(field(i), format!("duplicate {what} `{id}`"));
        }
    }
    Ok(seen)
}

impl Snapshot {
    /// Checks everything a pass relies on.
    ///
    /// # Errors
    ///
    /// The first offending field: a zero capacity or demand, usage above capacity, a fraction
    /// outside (0, 1], a duplicate id, or a reference to an unknown queue or worker.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(cores) = self.config.default_cores {
            positive("config.default_cores", cores)?;
        }
        if let Some(max) = self.config.max_drivers {
            positive("config.max_drivers", max)?;
        }
        fraction("config.driver_share", self.config.driver_share)?;

        validate_queues(&self.queues)?;
        // Work already in a parent queue (set up by a build before queue trees) is served
        // like a leaf's: only a new submission must name a leaf.
        let known_queue = |field: fmt::Arguments<'_>, queue: &QueueName| {
            if is_known(&self.queues, queue) {
                Ok(())
            } else {
                refuse(field, NotALeaf::Unknown(queue.clone()).to_string())
            }
        };

        let workers = unique("worker id", self.workers.iter().map(|w| &w.id), |i| {
            format!("workers[{i}].id")
        })?;
        for (i, worker) in self.workers.iter().enumerate() {
            worker.validate(i)?;
        }

        unique("driver id", self.drivers.iter().map(|d| &d.id), |i| {
            format!("drivers[{i}].id")
        })?;
        for (i, driver) in self.drivers.iter().enumerate() {
            driver.need.validate(format_args!("drivers[{i}]."))?;
            known_queue(format_args!("drivers[{i}].queue"), &driver.queue)?;
            if let Some(gang) = &driver.gang {
                gang.validate(format_args!("drivers[{i}].gang"))?;
            }
        }
        for (i, pending) in self.pending_gangs.iter().enumerate() {
            known_queue(format_args!("pending_gangs[{i}].queue"), &pending.queue)?;
            pending
                .gang
                .validate(format_args!("pending_gangs[{i}].gang"))?;
        }
        for queue in self.drivers_hold.keys() {
            known_queue(format_args!("drivers_hold.{queue}"), queue)?;
        }

        unique("app id", self.apps.iter().map(|a| &a.id), |i| {
            format!("apps[{i}].id")
        })?;
        for (i, app) in self.apps.iter().enumerate() {
            known_queue(format_args!("apps[{i}].queue"), &app.queue)?;
            if let Some(cores) = app.cores_max {
                positive(format_args!("apps[{i}].cores_max"), cores)?;
            }
            if let Some(cores) = app.executor_cores {
                positive(format_args!("apps[{i}].executor_cores"), cores)?;
            }
            if let Some(minimum) = app.min_executors {
                positive(format_args!("apps[{i}].min_executors"), minimum)?;
                if app.executor_cores.is_none() {
                    return refuse(
                        format_args!("apps[{i}].min_executors"),
                        "a gang needs executor_cores: without it an app has one executor a \
                         worker, which takes all the cores it is given",
                    );
                }
            }
            positive(
                format_args!("apps[{i}].executor_memory_mb"),
                app.executor_memory_mb,
            )?;
            resource_amounts(
                format_args!("apps[{i}].executor_resources"),
                &app.executor_resources,
            )?;
            let mut profiles = HashSet::new();
            for (j, profile) in app.profiles.iter().enumerate() {
                let field = format!("apps[{i}].profiles[{j}]");
                positive(format_args!("{field}.id"), profile.id)?;
                if !profiles.insert(profile.id) {
                    return refuse(
                        format_args!("{field}.id"),
                        format!("duplicate profile {}", profile.id),
                    );
                }
                if let Some(cores) = profile.executor_cores {
                    positive(format_args!("{field}.executor_cores"), cores)?;
                }
                positive(
                    format_args!("{field}.executor_memory_mb"),
                    profile.executor_memory_mb,
                )?;
                resource_amounts(
                    format_args!("{field}.executor_resources"),
                    &profile.executor_resources,
                )?;
            }
            for (j, executor) in app.executors.iter().enumerate() {
                if executor.profile != 0 && !profiles.contains(&executor.profile) {
                    return refuse(
                        format_args!("apps[{i}].executors[{j}].profile"),
                        format!("the app has no profile {}", executor.profile),
                    );
                }
                if !workers.contains(&executor.worker) {
                    return refuse(
                        format_args!("apps[{i}].executors[{j}].worker"),
                        format!("unknown worker `{}`", executor.worker),
                    );
                }
                executor
                    .resources
                    .validate(format_args!("apps[{i}].executors[{j}]."))?;
            }
        }
        Ok(())
    }
}

impl Worker {
    /// Checks worker `i` of a snapshot.
    fn validate(&self, i: usize) -> Result<(), InputError> {
        let field = format_args!("workers[{i}]");
        let (capacity, used) = (&self.capacity, &self.used);
        validate_amounts(
            format_args!("{field}."),
            capacity.cores,
            capacity.memory_mb,
            &capacity.custom,
        )?;
        if used.cores > capacity.cores {
            return refuse(
                format_args!("{field}.cores_used"),
                format!(
                    "{} exceeds the worker's {} cores",
                    used.cores, capacity.cores
                ),
            );
        }
        if used.memory_mb > capacity.memory_mb {
            return refuse(
                format_args!("{field}.memory_used_mb"),
                format!(
                    "{} exceeds the worker's {} MB",
                    used.memory_mb, capacity.memory_mb
                ),
            );
        }
        for (name, &used) in &used.custom {
            let capacity = capacity.custom.get(name).copied().unwrap_or(0);
            if used > capacity {
                return refuse(
                    format_args!("{field}.resources_used.{name}"),
                    format!("{used} exceeds the worker's {capacity}"),
                );
            }
        }
        Ok(())
    }
}
