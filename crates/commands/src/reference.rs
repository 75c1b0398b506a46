//! The book's references made from the code: the command line (`reference/cli.md`) from the
//! command's own definitions, the files Muster reads (`reference/files.md`) from the types
//! they are read into, the metrics (`reference/metrics.md`) from the registries, and the
//! gRPC API (`reference/grpc.md`) from the `.proto` files. A test fails when a committed page
//! differs from what the code gives, and `UPDATE_GOLDENFILES=1` writes it again.

mod files;
mod grpc;
mod metrics;

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

use crate::Cli;

/// The id mdBook gives a heading.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// `text` safe in a table's cell: one line, its bars escaped.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

/// The page: every visible command, its usage and its arguments, depth first.
fn page() -> String {
    let mut page = String::from(
        "# Command-line reference\n\n\
         Every `muster` command and its arguments, as `muster help COMMAND` gives them. This \
         page is made from the command's own definitions, and a test keeps it so.\n",
    );
    let mut root = Cli::command();
    root.build();
    for command in visible(&root) {
        section(&mut page, "muster", command);
    }
    page
}

/// `command`'s subcommands a user is shown, without clap's own `help`.
fn visible(command: &Command) -> impl Iterator<Item = &Command> {
    command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// `command`'s section, then its subcommands'.
fn section(page: &mut String, parent: &str, command: &Command) {
    let path = format!("{parent} {}", command.get_name());
    let about = command
        .get_long_about()
        .or(command.get_about())
        .map(ToString::to_string)
        .unwrap_or_default();
    let usage = command
        .clone()
        .bin_name(&path)
        .render_usage()
        .to_string()
        .trim_start_matches("Usage: ")
        .to_owned();
    write!(page, "\n## `{path}`\n\n{about}\n\n```text\n{usage}\n```\n").unwrap();
    let arguments: Vec<&Arg> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !arguments.is_empty() {
        page.push_str("\n| Argument | What it is |\n|---|---|\n");
        for argument in arguments {
            writeln!(page, "| {} | {} |", name(argument), description(argument)).unwrap();
        }
    }
    for sub in visible(command) {
        section(page, &path, sub);
    }
}

/// How an argument is written: `<FILE>`, `--cores <CORES>`, `-f, --follow`.
fn name(argument: &Arg) -> String {
    let value = argument
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", argument.get_id().as_str().to_uppercase()));
    let Some(long) = argument.get_long() else {
        return format!("`{value}`");
    };
    let mut name = match argument.get_short() {
        Some(short) => format!("`-{short}`, `--{long}"),
        None => format!("`--{long}"),
    };
    if argument.get_action().takes_values() {
        name.push(' ');
        name.push_str(&value);
    }
    name.push('`');
    name
}

/// What an argument is, its default and its environment variable, on one table row.
fn description(argument: &Arg) -> String {
    let mut text = argument
        .get_long_help()
        .or(argument.get_help())
        .map(ToString::to_string)
        .unwrap_or_default()
        .replace("\n\n", "<br>")
        .replace('\n', " ")
        .replace('|', "\\|");
    if !text.is_empty() && !text.ends_with(['.', '!', '?']) {
        text.push('.');
    }
    let defaults: Vec<String> = argument
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && argument.get_action().takes_values() {
        write!(text, " Default: `{}`.", defaults.join(",")).unwrap();
    }
    if let Some(variable) = argument.get_env() {
        write!(text, " Environment: `{}`.", variable.to_string_lossy()).unwrap();
    }
    text.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::path::Path;

    use goldenfile::Mint;

    fn root() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// `page` is what `docs/src/reference/NAME` holds.
    fn check(name: &str, page: &str) {
        let mut mint = Mint::new(root().join("docs/src/reference"));
        mint.new_goldenfile(name)
            .unwrap()
            .write_all(page.as_bytes())
            .unwrap();
    }

    #[test]
    fn the_books_command_line_reference_is_what_the_commands_define() {
        check("cli.md", &super::page());
    }

    #[test]
    fn the_books_file_reference_is_what_the_types_define() {
        check("files.md", &super::files::page(root()));
    }

    #[test]
    fn the_books_metric_reference_is_what_the_registries_export() {
        check("metrics.md", &super::metrics::page());
    }

    #[test]
    fn the_books_grpc_reference_is_what_the_proto_files_define() {
        check("grpc.md", &super::grpc::page(root()));
    }
}
