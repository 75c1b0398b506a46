//! The largest values Muster accepts from anyone: names, programs and resource amounts. A
//! request beyond them is refused with the field it names, before it can cost memory, log
//! space or arithmetic overflow anywhere.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::InputError;

/// The longest name (of an app, driver, queue, worker, host or user), in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// The largest program: command, arguments and environment together, in bytes.
pub const MAX_PROGRAM_BYTES: usize = 64 * 1024;

/// The most cores one worker may offer or one request ask for.
pub const MAX_CORES: u32 = 1 << 20;

/// The most memory one worker may offer or one request ask for, in MB: one PiB.
pub const MAX_MEMORY_MB: u64 = 1 << 30;

/// The most kinds of custom resource one worker or request may name.
pub const MAX_CUSTOM_RESOURCES: usize = 64;

/// The most units of one custom resource a worker may offer or a request ask for: each unit
/// a process holds is an address the log records.
pub const MAX_CUSTOM_AMOUNT: u32 = 4096;

/// The longest web address (an application's UI), in bytes.
pub const MAX_WEB_ADDRESS_BYTES: usize = 2048;

/// The largest gRPC message a client or worker may send a master, in bytes.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The largest answer a client takes from the masters: the status of a large cluster, with
/// its retained applications' ended executors, runs past gRPC's default of 4 MiB.
pub const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// The most bytes of a process's output one read returns.
pub const MAX_LOG_CHUNK_BYTES: u32 = 1024 * 1024;

/// What one read of a process's output returns when the caller names no size.
pub const DEFAULT_LOG_CHUNK_BYTES: u32 = 64 * 1024;

/// Whether `id` can name one directory on a worker (its processes' directories are named by
/// their ids): not empty, `.` or `..`, and without `/` or NUL.
pub fn names_a_directory(id: &str) -> bool {
    !(id.is_empty() || id == "." || id == ".." || id.contains(['/', '\0']))
}

fn too_long(field: impl fmt::Display, what: &str, limit: usize) -> InputError {
    InputError {
        field: field.to_string(),
        message: format!("{what} longer than {limit} bytes"),
    }
}

/// Refuses a name longer than [`MAX_NAME_BYTES`].
///
/// # Errors
///
/// `field: longer than 256 bytes`.
pub fn name(field: impl fmt::Display, value: &str) -> Result<(), InputError> {
    if value.len() > MAX_NAME_BYTES {
        return Err(too_long(field, "a name", MAX_NAME_BYTES));
    }
    Ok(())
}

/// Refuses a program whose command, arguments and environment together exceed
/// [`MAX_PROGRAM_BYTES`].
///
/// # Errors
///
/// Named after the largest of the three: `env: the command, arguments and environment come
/// to 102461 bytes, more than 65536 (the environment: 102400)`.
pub fn program(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<(), InputError> {
    let parts = [
        ("command", "the command", command.len()),
        ("args", "the arguments", args.iter().map(String::len).sum()),
        (
            "env",
            "the environment",
            env.iter().map(|(k, v)| k.len() + v.len()).sum(),
        ),
    ];
    let bytes: usize = parts.iter().map(|(_, _, bytes)| bytes).sum();
    if bytes <= MAX_PROGRAM_BYTES {
        return Ok(());
    }
    let (field, largest, most) = parts
        .into_iter()
        .max_by_key(|(_, _, bytes)| *bytes)
        .expect("three parts");
    Err(InputError {
        field: field.to_owned(),
        message: format!(
            "the command, arguments and environment come to {bytes} bytes, more than \
             {MAX_PROGRAM_BYTES} ({largest}: {most})"
        ),
    })
}

/// Refuses a web address that is not `http://` or `https://` followed by printable
/// characters without spaces, or is longer than [`MAX_WEB_ADDRESS_BYTES`]; empty means none
/// and passes.
///
/// # Errors
///
/// `field: ...` saying which rule it breaks.
pub fn web_address(field: impl fmt::Display, value: &str) -> Result<(), InputError> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > MAX_WEB_ADDRESS_BYTES {
        return Err(too_long(field, "a web address", MAX_WEB_ADDRESS_BYTES));
    }
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"));
    if !rest.is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_graphic())) {
        return Err(InputError {
            field: field.to_string(),
            message: format!(
                "{value:?} is not an http:// or https:// address of printable characters"
            ),
        });
    }
    Ok(())
}

/// Refuses amounts beyond [`MAX_CORES`], [`MAX_MEMORY_MB`], [`MAX_CUSTOM_RESOURCES`] and
/// [`MAX_CUSTOM_AMOUNT`], and custom resource names beyond [`MAX_NAME_BYTES`].
///
/// # Errors
///
/// The first amount too large, naming its field.
pub fn amounts(
    prefix: impl fmt::Display,
    cores: u32,
    memory_mb: u64,
    custom: &BTreeMap<String, u32>,
) -> Result<(), InputError> {
    let over = |field: fmt::Arguments<'_>, limit: String| InputError {
        field: field.to_string(),
        message: format!("must be at most {limit}"),
    };
    if cores > MAX_CORES {
        return Err(over(format_args!("{prefix}cores"), MAX_CORES.to_string()));
    }
    if memory_mb > MAX_MEMORY_MB {
        return Err(over(
            format_args!("{prefix}memory_mb"),
            format!("{MAX_MEMORY_MB} (1 PiB)"),
        ));
    }
    if custom.len() > MAX_CUSTOM_RESOURCES {
        return Err(InputError {
            field: format!("{prefix}resources"),
            message: format!("at most {MAX_CUSTOM_RESOURCES} kinds of resource"),
        });
    }
    for (resource, &amount) in custom {
        name(format_args!("{prefix}resources"), resource)?;
        if amount > MAX_CUSTOM_AMOUNT {
            return Err(over(
                format_args!("{prefix}resources.{resource}"),
                MAX_CUSTOM_AMOUNT.to_string(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_at_the_limit_pass_and_beyond_it_are_refused_by_field() {
        assert!(name("name", &"n".repeat(MAX_NAME_BYTES)).is_ok());
        let error = name("apps[0].name", &"n".repeat(MAX_NAME_BYTES + 1)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "apps[0].name: a name longer than 256 bytes"
        );

        let env = BTreeMap::from([("K".to_owned(), "v".repeat(MAX_PROGRAM_BYTES - 2))]);
        assert!(program("x", &[], &env).is_ok());
        assert_eq!(
            program("xy", &[], &env).unwrap_err().to_string(),
            "env: the command, arguments and environment come to 65537 bytes, more than 65536 \
             (the environment: 65535)"
        );
        let args = vec!["a".repeat(MAX_PROGRAM_BYTES)];
        assert_eq!(
            program("x", &args, &BTreeMap::new()).unwrap_err().field,
            "args"
        );

        let no_custom = BTreeMap::new();
        assert!(amounts("", MAX_CORES, MAX_MEMORY_MB, &no_custom).is_ok());
        assert_eq!(
            amounts("", MAX_CORES + 1, 1, &no_custom).unwrap_err().field,
            "cores"
        );
        assert_eq!(
            amounts("workers[0].", 1, MAX_MEMORY_MB + 1, &no_custom)
                .unwrap_err()
                .field,
            "workers[0].memory_mb"
        );
        let many: BTreeMap<String, u32> = (0..=MAX_CUSTOM_RESOURCES)
            .map(|i| (format!("r{i}"), 1))
            .collect();
        assert!(amounts("", 1, 1, &many).is_err());
    }

    #[test]
    fn a_web_address_is_http_or_https_and_printable() {
        for good in [
            "",
            "http://10.0.0.5:4040",
            "https://spark.example.com/proxy/app-1/",
        ] {
            assert!(web_address("ui_address", good).is_ok(), "{good}");
        }
        for bad in [
            "10.0.0.5:4040",
            "javascript:alert(1)",
            "http://",
            "http://a b",
            "http://a\nb",
            "ftp://host",
        ] {
            let error = web_address("ui_address", bad).unwrap_err();
            assert_eq!(error.field, "ui_address", "{bad}");
        }
        let long = format!("http://{}", "a".repeat(MAX_WEB_ADDRESS_BYTES));
        assert_eq!(
            web_address("ui_address", &long).unwrap_err().to_string(),
            "ui_address: a web address longer than 2048 bytes"
        );
    }
}
