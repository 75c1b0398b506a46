//! What a worker has and work needs: cores, memory and custom resources (`gpu`, ...), as one
//! value with checked arithmetic and the one fit check that the placer, the plan re-check
//! and the replicated state all use (Nomad's `ComparableResources` and `AllocsFit`).
//!
//! Sums and differences keep no zero custom amounts, so two equal amounts compare equal
//! however they were reached; [`Resources::validate`] refuses zero amounts in what is asked.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits;
use crate::model::{InputError, positive, resource_amounts};

/// Custom resources (e.g. `gpu`) by name, as whole amounts.
pub type ResourceAmounts = BTreeMap<String, u32>;

/// What one driver or executor uses, as its worker measures it in its control group: the
/// memory it holds now and the CPU time it has taken so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Memory in use, in bytes.
    pub memory_bytes: u64,
    /// CPU time since it started, in milliseconds (of all its cores together), where the
    /// worker counts it.
    pub cpu_ms: Option<u64>,
}

/// Which unit of each custom resource is which, by name (`gpu` → `["0", "2"]`): the
/// addresses a worker offers, or those one process holds. A worker that names none for a
/// resource has the addresses `0` to its amount less one, as Spark numbers the GPUs a
/// discovery script finds; a process is told its own, so that no two use the same device.
pub type ResourceAddresses = BTreeMap<String, Vec<String>>;

/// Addresses as a person writes them: `gpu=0,2 fpga=1`.
pub struct ListedAddresses<'a>(pub &'a ResourceAddresses);

impl fmt::Display for ListedAddresses<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, list)) in self.0.iter().enumerate() {
            let space = if i == 0 { "" } else { " " };
            write!(f, "{space}{name}={}", list.join(","))?;
        }
        Ok(())
    }
}

/// The addresses of `amount` units of resource `name` on a worker that gave `given`: the
/// list given for it, else `0` to `amount - 1`.
pub fn addresses_of<'a>(
    name: &str,
    amount: u32,
    given: &'a ResourceAddresses,
) -> Box<dyn Iterator<Item = std::borrow::Cow<'a, str>> + 'a> {
    match given.get(name) {
        Some(list) => Box::new(list.iter().map(|a| a.as_str().into())),
        None => Box::new((0..amount).map(|a| a.to_string().into())),
    }
}

/// Whether `address` is one of the `amount` units of resource `name` on a worker that gave
/// `given`, without listing them all.
pub fn has_address(name: &str, amount: u32, given: &ResourceAddresses, address: &str) -> bool {
    match given.get(name) {
        Some(list) => list.iter().any(|a| a == address),
        None => address
            .parse::<u32>()
            .is_ok_and(|n| n < amount && n.to_string() == address),
    }
}

/// Checks the addresses a worker gives for the custom resources of its `capacity`: each list
/// belongs to one of them and holds as many addresses as its amount, none twice, each a
/// short word of letters, digits and `.`, `_`, `:`, `/`, `-` (a process gets them in its
/// environment as one comma-separated list). Fields are named `{field}.NAME`.
///
/// # Errors
///
/// The first offending list.
pub fn validate_addresses(
    field: impl fmt::Display,
    capacity: &ResourceAmounts,
    addresses: &ResourceAddresses,
) -> Result<(), InputError> {
    let refuse = |name: &str, message: String| InputError {
        field: format!("{field}.{name}"),
        message,
    };
    for (name, list) in addresses {
        let amount = capacity.get(name).copied().unwrap_or(0);
        if list.len() != amount as usize {
            return Err(refuse(
                name,
                format!("{} addresses for an amount of {amount}", list.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for address in list {
            limits::name(format_args!("{field}.{name}"), address)?;
            let allowed = |c: char| c.is_ascii_alphanumeric() || "._:/-".contains(c);
            if address.is_empty() || !address.chars().all(allowed) {
                return Err(refuse(
                    name,
                    format!("{address:?} is not an address (letters, digits and . _ : / - only)"),
                ));
            }
            if !seen.insert(address) {
                return Err(refuse(name, format!("address `{address}` given twice")));
            }
        }
    }
    Ok(())
}

/// `addresses` without the lists that only repeat the default numbering (`gpu: ["0", "1"]`
/// for two GPUs), so that a worker that names its addresses `0` and `1` registers as one
/// that gives only the amount.
pub fn without_default_addresses(mut addresses: ResourceAddresses) -> ResourceAddresses {
    addresses.retain(|_, list| {
        !list
            .iter()
            .enumerate()
            .all(|(i, address)| *address == i.to_string())
    });
    addresses
}

/// Reads custom amounts leaving zero ones out: `"gpu": 0` says there is none.
pub(crate) fn nonzero_amounts<'de, D: Deserializer<'de>>(
    input: D,
) -> Result<ResourceAmounts, D::Error> {
    let mut amounts = ResourceAmounts::deserialize(input)?;
    amounts.retain(|_, amount| *amount > 0);
    Ok(amounts)
}

/// An amount of every resource: a worker's capacity or usage, or what one driver or executor
/// needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// Cores.
    pub cores: u32,
    /// Memory in MB.
    pub memory_mb: u64,
    /// Custom resources by name; absent in JSON means none.
    #[serde(default)]
    pub custom: ResourceAmounts,
}

/// One kind of resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resource {
    /// Cores.
    Cores,
    /// Memory, in MB.
    Memory,
    /// A custom resource, by name.
    Custom(String),
}

impl fmt::Display for Resource {
    /// The unit an amount of it is written with: `cores`, `MB`, or its name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cores => f.write_str("cores"),
            Self::Memory => f.write_str("MB"),
            Self::Custom(name) => f.write_str(name),
        }
    }
}

/// Why a need does not fit: the first resource short, in the order cores, memory, then custom
/// resources by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The resource that is short.
    pub resource: Resource,
    /// How much of it is free.
    pub free: u64,
    /// How much is needed.
    pub needed: u64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{free} {unit} free, {needed} needed",
            free = self.free,
            unit = self.resource,
            needed = self.needed
        )
    }
}

impl Resources {
    /// Cores and memory, no custom resources.
    pub fn new(cores: u32, memory_mb: u64) -> Self {
        Self {
            cores,
            memory_mb,
            custom: ResourceAmounts::new(),
        }
    }

    /// These resources with `custom` as their custom resources.
    #[must_use]
    pub fn with_custom(mut self, custom: ResourceAmounts) -> Self {
        self.custom = custom;
        self
    }

    /// How much of custom resource `name` there is.
    pub fn custom(&self, name: &str) -> u32 {
        self.custom.get(name).copied().unwrap_or(0)
    }

    /// Whether `need` fits in these (free) resources.
    ///
    /// # Errors
    ///
    /// The first resource that is short.
    // Inlined: a pass checks it for every worker it walks and every grant it makes.
    #[inline]
    pub fn fits(&self, need: &Resources) -> Result<(), Shortfall> {
        let short = |resource, free: u64, needed: u64| {
            if free < needed {
                Err(Shortfall {
                    resource,
                    free,
                    needed,
                })
            } else {
                Ok(())
            }
        };
        short(Resource::Cores, self.cores.into(), need.cores.into())?;
        short(Resource::Memory, self.memory_mb, need.memory_mb)?;
        for (name, &amount) in &need.custom {
            short(
                Resource::Custom(name.clone()),
                self.custom(name).into(),
                amount.into(),
            )?;
        }
        Ok(())
    }

    /// The sum, or `None` if an amount overflows.
    pub fn checked_add(&self, other: &Resources) -> Option<Resources> {
        let mut custom = self.custom.clone();
        for (name, &amount) in &other.custom {
            let sum = custom.entry(name.clone()).or_insert(0);
            *sum = sum.checked_add(amount)?;
        }
        custom.retain(|_, amount| *amount > 0);
        Some(Self {
            cores: self.cores.checked_add(other.cores)?,
            memory_mb: self.memory_mb.checked_add(other.memory_mb)?,
            custom,
        })
    }

    /// What is left after taking `other`, or `None` if `other` does not fit.
    pub fn checked_sub(&self, other: &Resources) -> Option<Resources> {
        let mut left = self.clone();
        left.subtract(other).ok()?;
        Some(left)
    }

    /// What is left after taking `other`, each amount no lower than zero (room freed on a
    /// worker whose usage did not count all of it).
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        let mut custom = self.custom.clone();
        for (name, &amount) in &other.custom {
            if let Some(left) = custom.get_mut(name) {
                *left = left.saturating_sub(amount);
            }
        }
        custom.retain(|_, amount| *amount > 0);
        Self {
            cores: self.cores.saturating_sub(other.cores),
            memory_mb: self.memory_mb.saturating_sub(other.memory_mb),
            custom,
        }
    }

    /// Both together, each amount at most its type's largest: what holders of many
    /// executors hold, where a sum is only compared.
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        let mut custom = self.custom.clone();
        for (name, &amount) in &other.custom {
            let total = custom.entry(name.clone()).or_default();
            *total = total.saturating_add(amount);
        }
        Self {
            cores: self.cores.saturating_add(other.cores),
            memory_mb: self.memory_mb.saturating_add(other.memory_mb),
            custom,
        }
    }

    /// `count` of these together: what `count` executors of this size hold.
    ///
    /// # Panics
    ///
    /// An amount overflows; callers scale only what fits a worker.
    pub fn times(mut self, count: u32) -> Resources {
        let scale = |amount: u32| amount.checked_mul(count).expect("a worker's amount");
        self.cores = scale(self.cores);
        self.memory_mb = self
            .memory_mb
            .checked_mul(count.into())
            .expect("a worker's amount");
        for amount in self.custom.values_mut() {
            *amount = scale(*amount);
        }
        self
    }

    /// Takes `other` out of these, in place (the placer does so for every grant).
    ///
    /// # Errors
    ///
    /// `other` does not fit: the first resource short; nothing is taken then.
    pub fn subtract(&mut self, other: &Resources) -> Result<(), Shortfall> {
        self.fits(other)?;
        self.cores -= other.cores;
        self.memory_mb -= other.memory_mb;
        for (name, &amount) in &other.custom {
            if let Some(left) = self.custom.get_mut(name) {
                *left -= amount;
                if *left == 0 {
                    self.custom.remove(name);
                }
            }
        }
        Ok(())
    }

    /// Checks an amount that must hold something: at least one core and one MB, custom
    /// resources named and at least 1, nothing beyond the [`limits`]. Fields
    /// are named `{prefix}cores`, `{prefix}memory_mb` and `{prefix}resources.NAME`.
    ///
    /// # Errors
    ///
    /// The first offending field.
    pub fn validate(&self, prefix: impl fmt::Display) -> Result<(), InputError> {
        validate_amounts(prefix, self.cores, self.memory_mb, &self.custom)
    }
}

/// [`Resources::validate`] on amounts not gathered in a [`Resources`] (a worker's capacity),
/// so that checking them needs no copy.
pub(crate) fn validate_amounts(
    prefix: impl fmt::Display,
    cores: u32,
    memory_mb: u64,
    custom: &ResourceAmounts,
) -> Result<(), InputError> {
    positive(format_args!("{prefix}cores"), cores)?;
    positive(format_args!("{prefix}memory_mb"), memory_mb)?;
    resource_amounts(format_args!("{prefix}resources"), custom)?;
    limits::amounts(prefix, cores, memory_mb, custom)
}

/// The largest share of `cluster` that `held` is of any resource the cluster has.
pub fn dominant_share(held: &Resources, cluster: &Resources) -> f64 {
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    cluster
        .custom
        .iter()
        .map(|(name, &whole)| share(u64::from(held.custom(name)), u64::from(whole)))
        .fold(
            share(u64::from(held.cores), u64::from(cluster.cores))
                .max(share(held.memory_mb, cluster.memory_mb)),
            f64::max,
        )
}

impl fmt::Display for Resources {
    /// `1 core, 1024 MB, gpu=1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.cores == 1 { "" } else { "s" };
        write!(f, "{} core{plural}, {} MB", self.cores, self.memory_mb)?;
        for (name, amount) in &self.custom {
            write!(f, ", {name}={amount}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(cores: u32, memory_mb: u64, gpu: u32) -> Resources {
        Resources::new(cores, memory_mb).with_custom([("gpu".to_owned(), gpu)].into())
    }

    #[test]
    fn fits_names_the_first_resource_short() {
        let free = gpus(4, 1024, 1);
        assert_eq!(free.fits(&gpus(4, 1024, 1)), Ok(()));
        let short = free.fits(&gpus(5, 2048, 2)).unwrap_err();
        assert_eq!(
            (short.resource, short.free, short.needed),
            (Resource::Cores, 4, 5)
        );
        let short = free.fits(&gpus(1, 2048, 2)).unwrap_err();
        assert_eq!(short.to_string(), "1024 MB free, 2048 needed");
        let short = free.fits(&gpus(1, 1, 2)).unwrap_err();
        assert_eq!(short.to_string(), "1 gpu free, 2 needed");
        let short = Resources::new(8, 8192).fits(&gpus(1, 1, 1)).unwrap_err();
        assert_eq!(short.resource, Resource::Custom("gpu".into()));
    }

    #[test]
    fn times_scales_every_amount() {
        assert_eq!(gpus(2, 512, 1).times(3), gpus(6, 1536, 3));
        assert_eq!(Resources::new(2, 512).times(1), Resources::new(2, 512));
    }

    #[test]
    fn add_and_sub_are_checked_and_drop_zero_amounts() {
        let capacity = gpus(4, 1024, 2);
        let left = capacity.checked_sub(&gpus(1, 24, 2)).unwrap();
        let mut taken = capacity.clone();
        taken.subtract(&gpus(1, 24, 2)).unwrap();
        assert_eq!(taken, left);
        assert_eq!(
            taken.clone().subtract(&gpus(4, 1, 0)).unwrap_err().resource,
            Resource::Cores
        );
        assert_eq!(left, Resources::new(3, 1000));
        assert_eq!(left.checked_add(&gpus(1, 24, 2)), Some(capacity.clone()));
        assert_eq!(capacity.checked_sub(&gpus(5, 1, 1)), None);
        assert_eq!(Resources::new(1, 1).checked_sub(&gpus(1, 1, 1)), None);
        assert_eq!(
            Resources::new(u32::MAX, 1).checked_add(&Resources::new(1, 1)),
            None
        );
        let zero_fpga = Resources::new(1, 1).with_custom([("fpga".to_owned(), 0)].into());
        assert_eq!(
            zero_fpga.checked_add(&Resources::default()),
            Some(Resources::new(1, 1))
        );
    }

    #[test]
    fn validate_names_the_field() {
        assert!(gpus(1, 1, 1).validate("").is_ok());
        assert_eq!(
            Resources::new(0, 1)
                .validate("drivers[0].")
                .unwrap_err()
                .field,
            "drivers[0].cores"
        );
        let zero_gpu = gpus(1, 1, 0);
        assert_eq!(zero_gpu.validate("").unwrap_err().field, "resources.gpu");
    }

    #[test]
    fn addresses_are_given_or_numbered_from_zero() {
        let given: ResourceAddresses = [("gpu".to_owned(), vec!["a".into(), "b".into()])].into();
        let listed = |name, amount| -> Vec<String> {
            addresses_of(name, amount, &given)
                .map(String::from)
                .collect()
        };
        assert_eq!(listed("gpu", 2), ["a", "b"]);
        assert_eq!(listed("fpga", 3), ["0", "1", "2"]);
        assert!(has_address("gpu", 2, &given, "b") && !has_address("gpu", 2, &given, "0"));
        assert!(has_address("fpga", 3, &given, "2") && !has_address("fpga", 3, &given, "3"));
        assert!(
            !has_address("fpga", 3, &given, "02"),
            "an address is written one way"
        );
        let numbered = [("gpu".to_owned(), vec!["0".into(), "1".into()])].into();
        assert!(without_default_addresses(numbered).is_empty());
        assert_eq!(without_default_addresses(given.clone()), given);
    }

    #[test]
    fn validate_addresses_names_the_list() {
        let capacity: ResourceAmounts = [("gpu".to_owned(), 2)].into();
        let check = |list: &[&str]| {
            let addresses = [(
                "gpu".to_owned(),
                list.iter().map(|a| a.to_string()).collect(),
            )];
            validate_addresses("addresses", &capacity, &addresses.into()).map_err(|e| e.to_string())
        };
        assert_eq!(check(&["0", "GPU-1f"]), Ok(()));
        assert_eq!(
            check(&["0"]).unwrap_err(),
            "addresses.gpu: 1 addresses for an amount of 2"
        );
        assert_eq!(
            check(&["0", "0"]).unwrap_err(),
            "addresses.gpu: address `0` given twice"
        );
        assert!(check(&["0", "1,2"]).unwrap_err().contains("not an address"));
        assert!(
            check(&["0", "a\0b"])
                .unwrap_err()
                .contains("not an address")
        );
        assert_eq!(check(&["GPU-1f2e", "MIG-0/1:2.3_x"]), Ok(()));
        let fpga = [("fpga".to_owned(), vec!["0".to_owned()])].into();
        assert_eq!(
            validate_addresses("addresses", &capacity, &fpga)
                .unwrap_err()
                .to_string(),
            "addresses.fpga: 1 addresses for an amount of 0"
        );
    }

    #[test]
    fn displays_like_a_person_writes_it() {
        assert_eq!(gpus(1, 512, 2).to_string(), "1 core, 512 MB, gpu=2");
        assert_eq!(Resources::new(3, 1024).to_string(), "3 cores, 1024 MB");
    }
}
