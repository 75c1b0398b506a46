//! Who may use a queue, and how much of it each user may have: user names, each queue's
//! access lists after YARN's `acl_submit_applications` and `acl_administer_queue`, and its
//! cap on each user's applications and drivers.
//!
//! A queue's lists name users, or [`EVERYONE`]. Unset, an ordinary queue takes everyone's
//! work and a prior queue nobody's but the admins' (admins may do anything, and are not
//! decided here): on a shared cluster, prior work is what an administrator allows, not what
//! anyone asks for. Administering a queue is killing others' work in it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{QueueName, SmolStr};
use crate::model::{GangStyle, InputError, OrderingPolicy, QueueConfig};

/// In an access list, every user.
pub const EVERYONE: &str = "*";

/// The longest user name.
pub const MAX_USER_BYTES: usize = 64;

/// Checks a user name: 1 to 64 ASCII letters, digits, `.`, `_` or `-` (it travels in
/// credentials and names files).
///
/// # Errors
///
/// `field: ...` saying what is wrong.
pub fn user_name(field: &str, name: &str) -> Result<(), InputError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_USER_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(InputError {
            field: field.to_owned(),
            message: format!(
                "`{name}` is not a user name: 1 to {MAX_USER_BYTES} letters, digits, `.`, `_` or `-`"
            ),
        })
    }
}

/// Who may submit to a queue, who may administer it, and how much each user may have in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueAccess {
    /// Who may submit; unset: everyone to an ordinary queue, only admins to a prior one.
    pub submit: Option<Vec<String>>,
    /// Who may kill others' work in the queue.
    pub administer: Vec<String>,
    /// How many active (waiting or running) applications and drivers each named user may
    /// have in the queue (YARN's maximum applications per user); unset: no cap.
    pub max_per_user: Option<u32>,
}

impl Default for QueueAccess {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl QueueAccess {
    /// The access of a queue that lists nothing.
    pub const DEFAULT: Self = Self {
        submit: None,
        administer: Vec::new(),
        max_per_user: None,
    };

    /// Whether `user` may submit to the queue, `prior` or not.
    pub fn may_submit(&self, prior: bool, user: &str) -> bool {
        match &self.submit {
            Some(users) => names(users, user),
            None => !prior,
        }
    }

    /// Whether `user` may kill others' work in the queue.
    pub fn may_administer(&self, user: &str) -> bool {
        names(&self.administer, user)
    }

    /// Checks the lists of the queue at `field`: each entry [`EVERYONE`] or one of `users`;
    /// and a cap of at least 1.
    ///
    /// # Errors
    ///
    /// `field.submit[i]: unknown user ...`, a malformed name, or a cap of 0.
    pub fn validate(&self, field: &str, users: &BTreeSet<&str>) -> Result<(), InputError> {
        if let Some(max) = self.max_per_user {
            crate::model::positive(format_args!("{field}.max_per_user"), max)?;
        }
        let lists = [("submit", self.submit.as_deref().unwrap_or_default())];
        let lists = lists
            .into_iter()
            .chain([("administer", &self.administer[..])]);
        for (list, entries) in lists {
            for (i, entry) in entries.iter().enumerate() {
                let at = format!("{field}.{list}[{i}]");
                if entry == EVERYONE {
                    continue;
                }
                user_name(&at, entry)?;
                if !users.contains(entry.as_str()) {
                    return Err(InputError {
                        field: at,
                        message: format!("unknown user `{entry}`: add it first (muster users add)"),
                    });
                }
            }
        }
        Ok(())
    }
}

fn names(list: &[String], user: &str) -> bool {
    list.iter().any(|entry| entry == EVERYONE || entry == user)
}

/// One queue as an operator writes it in a queue file: its settings and its access lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    /// The queue's name, unique.
    pub name: QueueName,
    /// See [`QueueConfig::prior`].
    #[serde(default)]
    pub prior: bool,
    /// See [`QueueConfig::threshold`].
    #[serde(default = "crate::model::one")]
    pub threshold: f64,
    /// See [`QueueConfig::max_capacity`].
    #[serde(default = "crate::model::one")]
    pub max_capacity: f64,
    /// See [`QueueConfig::capacity`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
    /// See [`QueueConfig::driver_share`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_share: Option<f64>,
    /// See [`QueueConfig::gang_timeout_s`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_timeout_s: Option<u64>,
    /// See [`QueueConfig::gang_style`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_style: Option<GangStyle>,
    /// See [`QueueConfig::ordering`].
    #[serde(default, skip_serializing_if = "OrderingPolicy::is_fifo")]
    pub ordering: OrderingPolicy,
    /// See [`QueueConfig::user_weights`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_weights: BTreeMap<SmolStr, f64>,
    /// See [`QueueConfig::max_priority`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    /// See [`QueueConfig::user_limit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<f64>,
    /// See [`QueueAccess::submit`].
    #[serde(default)]
    pub submit: Option<Vec<String>>,
    /// See [`QueueAccess::administer`].
    #[serde(default)]
    pub administer: Vec<String>,
    /// See [`QueueAccess::max_per_user`].
    #[serde(default)]
    pub max_per_user: Option<u32>,
}

impl QueueSpec {
    /// A queue with default settings and access.
    pub fn named(name: &str) -> Self {
        Self::from((QueueConfig::named(name), QueueAccess::default()))
    }

    /// Its settings and its access lists.
    pub fn split(&self) -> (QueueConfig, QueueAccess) {
        let config = QueueConfig {
            name: self.name.clone(),
            prior: self.prior,
            threshold: self.threshold,
            max_capacity: self.max_capacity,
            capacity: self.capacity,
            driver_share: self.driver_share,
            gang_timeout_s: self.gang_timeout_s,
            gang_style: self.gang_style,
            ordering: self.ordering,
            user_weights: self.user_weights.clone(),
            max_priority: self.max_priority,
            user_limit: self.user_limit,
        };
        let access = QueueAccess {
            submit: self.submit.clone(),
            administer: self.administer.clone(),
            max_per_user: self.max_per_user,
        };
        (config, access)
    }
}

impl From<(QueueConfig, QueueAccess)> for QueueSpec {
    fn from((config, access): (QueueConfig, QueueAccess)) -> Self {
        Self {
            name: config.name,
            prior: config.prior,
            threshold: config.threshold,
            max_capacity: config.max_capacity,
            capacity: config.capacity,
            driver_share: config.driver_share,
            gang_timeout_s: config.gang_timeout_s,
            gang_style: config.gang_style,
            ordering: config.ordering,
            user_weights: config.user_weights,
            max_priority: config.max_priority,
            user_limit: config.user_limit,
            submit: access.submit,
            administer: access.administer,
            max_per_user: access.max_per_user,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_lists_open_ordinary_queues_and_close_prior_ones() {
        let unset = QueueAccess::default();
        assert!(unset.may_submit(false, "alice"));
        assert!(!unset.may_submit(true, "alice"));
        assert!(!unset.may_administer("alice"));
        let granted = QueueAccess {
            submit: Some(vec!["alice".into()]),
            administer: vec![EVERYONE.into()],
            max_per_user: None,
        };
        assert!(granted.may_submit(true, "alice"));
        assert!(!granted.may_submit(true, "bob"));
        assert!(granted.may_administer("bob"));
        let closed = QueueAccess {
            submit: Some(Vec::new()),
            ..QueueAccess::default()
        };
        assert!(
            !closed.may_submit(false, "alice"),
            "an empty list is nobody"
        );
    }

    #[test]
    fn lists_name_known_users_or_everyone() {
        let users = BTreeSet::from(["alice"]);
        let access = QueueAccess {
            submit: Some(vec!["alice".into(), EVERYONE.into()]),
            administer: vec!["carol".into()],
            max_per_user: None,
        };
        let error = access.validate("queues[1]", &users).unwrap_err();
        assert_eq!(error.field, "queues[1].administer[0]");
        assert!(error.message.contains("unknown user `carol`"), "{error}");
        let malformed = QueueAccess {
            submit: Some(vec!["a b".into()]),
            ..QueueAccess::default()
        };
        let error = malformed.validate("queues[0]", &users).unwrap_err();
        assert_eq!(error.field, "queues[0].submit[0]");
        let no_room = QueueAccess {
            max_per_user: Some(0),
            ..QueueAccess::default()
        };
        let error = no_room.validate("queues[2]", &users).unwrap_err();
        assert_eq!(error.field, "queues[2].max_per_user");
        assert!(user_name("name", &"x".repeat(MAX_USER_BYTES)).is_ok());
        assert!(user_name("name", &"x".repeat(MAX_USER_BYTES + 1)).is_err());
        assert!(user_name("name", EVERYONE).is_err());
        assert!(user_name("name", "").is_err());
    }

    #[test]
    fn a_queue_file_entry_splits_into_settings_and_access() {
        let spec: QueueSpec =
            serde_json::from_str(r#"{"name": "prod", "prior": true, "submit": ["alice"]}"#)
                .unwrap();
        let (config, access) = spec.split();
        assert!(config.prior);
        assert_eq!(access.submit, Some(vec!["alice".to_owned()]));
        assert_eq!(QueueSpec::from((config, access)), spec);
        let misspelt = serde_json::from_str::<QueueSpec>(r#"{"name": "q", "submitt": []}"#);
        assert!(misspelt.is_err());
    }
}
