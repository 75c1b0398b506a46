//! The executors a driver has, where they run and what they have free: what Spark's
//! `TaskSchedulerImpl` keeps in `executorIdToHost`, `hostToExecutors` and `hostsByRack`.

use std::collections::BTreeMap;

use crate::ids::ExecutorId;

/// One live executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorInfo {
    /// The host it runs on.
    pub host: String,
    /// The rack of that host, if the worker was given one.
    pub rack: Option<String>,
    /// Cores, one per running task.
    pub cores: u32,
    /// Cores no task uses.
    pub free: u32,
    /// Being given back: offered no more tasks.
    pub draining: bool,
}

/// The live executors.
#[derive(Clone, Debug, Default)]
pub struct Executors {
    executors: BTreeMap<ExecutorId, ExecutorInfo>,
}

impl Executors {
    /// Whether `id` is live.
    pub fn is_alive(&self, id: ExecutorId) -> bool {
        self.executors.contains_key(&id)
    }

    /// Whether a live executor runs on `host`.
    pub fn has_host(&self, host: &str) -> bool {
        self.executors.values().any(|e| e.host == host)
    }

    /// Whether a live executor runs in `rack`.
    pub fn has_rack(&self, rack: &str) -> bool {
        self.executors
            .values()
            .any(|e| e.rack.as_deref() == Some(rack))
    }

    /// The rack of `host`, as its executors report it.
    pub fn rack_of(&self, host: &str) -> Option<&str> {
        self.executors
            .values()
            .find(|e| e.host == host)
            .and_then(|e| e.rack.as_deref())
    }

    /// Executor `id`, if live.
    pub fn get(&self, id: ExecutorId) -> Option<&ExecutorInfo> {
        self.executors.get(&id)
    }

    /// Every live executor, by id.
    pub fn iter(&self) -> impl Iterator<Item = (ExecutorId, &ExecutorInfo)> {
        self.executors.iter().map(|(&id, info)| (id, info))
    }

    pub(crate) fn insert(&mut self, id: ExecutorId, info: ExecutorInfo) {
        self.executors.insert(id, info);
    }

    pub(crate) fn remove(&mut self, id: ExecutorId) -> Option<ExecutorInfo> {
        self.executors.remove(&id)
    }

    pub(crate) fn get_mut(&mut self, id: ExecutorId) -> Option<&mut ExecutorInfo> {
        self.executors.get_mut(&id)
    }
}
