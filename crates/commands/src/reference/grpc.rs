//! The book's gRPC reference (`docs/src/reference/grpc.md`), made from the `.proto` files
//! under `proto/muster/v1` and their comments, as protox compiles them: every service and
//! method, every message with its fields, every enum with its values.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use prost_types::field_descriptor_proto::{Label, Type};

use super::{anchor, cell};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto, SourceCodeInfo,
};

/// The files, in the order the page shows them: the services clients use first.
const FILES: [&str; 6] = [
    "muster/v1/cluster.proto",
    "muster/v1/driver.proto",
    "muster/v1/app.proto",
    "muster/v1/worker.proto",
    "muster/v1/raft.proto",
    "muster/v1/types.proto",
];

// Field numbers of `FileDescriptorProto`, `DescriptorProto`, `EnumDescriptorProto` and
// `ServiceDescriptorProto`, as source locations' paths name them.
const FILE_MESSAGES: i32 = 4;
const FILE_ENUMS: i32 = 5;
const FILE_SERVICES: i32 = 6;
const FILE_SYNTAX: i32 = 12;
const MESSAGE_FIELDS: i32 = 2;
const MESSAGE_NESTED: i32 = 3;
const MESSAGE_ENUMS: i32 = 4;
const ENUM_VALUES: i32 = 2;
const SERVICE_METHODS: i32 = 2;

/// The page.
pub(super) fn page(root: &Path) -> String {
    let set = protox::compile(FILES, [root.join("proto")]).expect("the proto files compile");
    let mut page = String::from(
        "# gRPC API\n\n\
         Muster's processes speak gRPC in the package `muster.v1`: clients to any master, \
         workers and applications to the leader, masters to each other. Every call carries \
         the cluster's credential. This page is made from the `.proto` files under \
         `proto/muster/v1` and their comments, and a test keeps it so. New fields and \
         messages are written only once the cluster's log format admits them (see \
         [Upgrading](../operator/upgrading.md)).\n",
    );
    for name in FILES {
        let file = set
            .file
            .iter()
            .find(|f| f.name() == name)
            .expect("a compiled file");
        describe_file(&mut page, file);
    }
    page
}

/// `file`'s section: its comment, its services, then its messages and enums.
fn describe_file(page: &mut String, file: &FileDescriptorProto) {
    let comments = Comments::of(file.source_code_info.as_ref().expect("source info"));
    write!(
        page,
        "\n## `{}`\n",
        file.name().trim_start_matches("muster/v1/")
    )
    .unwrap();
    if let Some(about) = comments.detached(&[FILE_SYNTAX]) {
        write!(page, "\n{about}\n").unwrap();
    }
    for (s, service) in file.service.iter().enumerate() {
        let path = [FILE_SERVICES, s as i32];
        write!(page, "\n### Service `{}`\n", service.name()).unwrap();
        if let Some(about) = comments.leading(&path) {
            write!(page, "\n{about}\n").unwrap();
        }
        page.push_str("\n| Method | Request | Reply | What it does |\n|---|---|---|---|\n");
        for (m, method) in service.method.iter().enumerate() {
            let stream = |yes: bool| if yes { "stream " } else { "" };
            writeln!(
                page,
                "| `{}` | {}{} | {}{} | {} |",
                method.name(),
                stream(method.client_streaming()),
                type_link(method.input_type()),
                stream(method.server_streaming()),
                type_link(method.output_type()),
                cell(
                    &comments
                        .leading(&[&path[..], &[SERVICE_METHODS, m as i32]].concat())
                        .unwrap_or_default()
                )
            )
            .unwrap();
        }
    }
    for (i, message) in file.message_type.iter().enumerate() {
        describe_message(page, &comments, message, "", &[FILE_MESSAGES, i as i32]);
    }
    for (i, enumeration) in file.enum_type.iter().enumerate() {
        describe_enum(page, &comments, enumeration, "", &[FILE_ENUMS, i as i32]);
    }
}

/// `message`'s section (named `Outer.Inner` when nested), then its nested types'.
fn describe_message(
    page: &mut String,
    comments: &Comments,
    message: &DescriptorProto,
    outer: &str,
    path: &[i32],
) {
    if message.options.as_ref().is_some_and(|o| o.map_entry()) {
        return;
    }
    let name = format!("{outer}{}", message.name());
    write!(page, "\n### `{name}`\n").unwrap();
    if let Some(about) = comments.leading(path) {
        write!(page, "\n{about}\n").unwrap();
    }
    if message.field.is_empty() {
        page.push_str("\nNo fields.\n");
    } else {
        page.push_str("\n| Field | Number | Type | What it is |\n|---|---|---|---|\n");
        for (f, field) in message.field.iter().enumerate() {
            let about = comments.leading(&[path, &[MESSAGE_FIELDS, f as i32]].concat());
            let oneof = field
                .oneof_index
                .filter(|_| !field.proto3_optional())
                .map(|i| format!(" (one of `{}`)", message.oneof_decl[i as usize].name()))
                .unwrap_or_default();
            writeln!(
                page,
                "| `{}` | {} | {}{oneof} | {} |",
                field.name(),
                field.number(),
                field_type(message, field),
                cell(&about.unwrap_or_default())
            )
            .unwrap();
        }
    }
    for (i, nested) in message.nested_type.iter().enumerate() {
        let nested_path = [path, &[MESSAGE_NESTED, i as i32]].concat();
        describe_message(page, comments, nested, &format!("{name}."), &nested_path);
    }
    for (i, enumeration) in message.enum_type.iter().enumerate() {
        let enum_path = [path, &[MESSAGE_ENUMS, i as i32]].concat();
        describe_enum(page, comments, enumeration, &format!("{name}."), &enum_path);
    }
}

/// `enumeration`'s section: its values and what each means.
fn describe_enum(
    page: &mut String,
    comments: &Comments,
    enumeration: &EnumDescriptorProto,
    outer: &str,
    path: &[i32],
) {
    write!(page, "\n### `{outer}{}`\n", enumeration.name()).unwrap();
    if let Some(about) = comments.leading(path) {
        write!(page, "\n{about}\n").unwrap();
    }
    page.push_str("\n| Value | Number | What it is |\n|---|---|---|\n");
    for (v, value) in enumeration.value.iter().enumerate() {
        let about = comments.leading(&[path, &[ENUM_VALUES, v as i32]].concat());
        writeln!(
            page,
            "| `{}` | {} | {} |",
            value.name(),
            value.number(),
            cell(&about.unwrap_or_default())
        )
        .unwrap();
    }
}

/// How `field` of `message` is typed: `repeated`, `optional` or a map, and its type.
fn field_type(message: &DescriptorProto, field: &FieldDescriptorProto) -> String {
    if field.r#type() == Type::Message
        && let Some(entry) = message.nested_type.iter().find(|nested| {
            nested.options.as_ref().is_some_and(|o| o.map_entry())
                && field.type_name().ends_with(&format!(".{}", nested.name()))
        })
    {
        let key = scalar_or_link(&entry.field[0]);
        let value = scalar_or_link(&entry.field[1]);
        return format!("map<{key}, {value}>");
    }
    let label = if field.label() == Label::Repeated {
        "repeated "
    } else if field.proto3_optional() {
        "optional "
    } else {
        ""
    };
    format!("{label}{}", scalar_or_link(field))
}

/// A scalar's name, or a link to the message or enum `field` holds.
fn scalar_or_link(field: &FieldDescriptorProto) -> String {
    match field.r#type() {
        Type::Message | Type::Enum => type_link(field.type_name()),
        scalar => scalar
            .as_str_name()
            .trim_start_matches("TYPE_")
            .to_lowercase(),
    }
}

/// A link to the section of the message or enum `.muster.v1.Name`.
fn type_link(full_name: &str) -> String {
    let name = full_name.trim_start_matches(".muster.v1.");
    format!("[`{name}`](#{})", anchor(name))
}

/// A file's comments, by the path of what they are attached to.
struct Comments {
    leading: BTreeMap<Vec<i32>, String>,
    detached: BTreeMap<Vec<i32>, String>,
}

impl Comments {
    fn of(info: &SourceCodeInfo) -> Self {
        let mut comments = Self {
            leading: BTreeMap::new(),
            detached: BTreeMap::new(),
        };
        for location in &info.location {
            if let Some(text) = location.leading_comments.as_deref().and_then(paragraph) {
                comments.leading.insert(location.path.clone(), text);
            }
            let detached: Vec<String> = location
                .leading_detached_comments
                .iter()
                .filter_map(|c| paragraph(c))
                .collect();
            if !detached.is_empty() {
                comments
                    .detached
                    .insert(location.path.clone(), detached.join("\n\n"));
            }
        }
        comments
    }

    fn leading(&self, path: &[i32]) -> Option<String> {
        self.leading.get(path).cloned()
    }

    fn detached(&self, path: &[i32]) -> Option<String> {
        self.detached
            .get(path)
            .or_else(|| self.leading.get(path))
            .cloned()
    }
}

/// A comment as one paragraph of Markdown: its lines trimmed and joined.
fn paragraph(comment: &str) -> Option<String> {
    let text = comment
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}
