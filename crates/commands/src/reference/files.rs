//! The book's reference of the files Muster reads (`docs/src/reference/files.md`), made from
//! the doc comments and serde attributes of the types those files are read into: a key
//! added, renamed, made optional or described anew in the code shows in the book, or the
//! test that compares the committed page fails.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

use super::{anchor, cell};
use syn::{Attribute, Expr, Fields, Item, ItemEnum, ItemStruct, Lit, Meta, Type};

/// The sources that define the types below, from the workspace's root.
const SOURCES: [&str; 9] = [
    "crates/leader/src/config.rs",
    "crates/core/src/model/mod.rs",
    "crates/core/src/model/queue.rs",
    "crates/core/src/model/work.rs",
    "crates/core/src/access.rs",
    "crates/core/src/tasks/pools.rs",
    "crates/driver/src/spec.rs",
    "crates/sim/src/trace.rs",
    "crates/sim/src/cluster.rs",
];

/// One file format: its heading, what reads it and how it is written, and its type.
struct Format {
    title: &'static str,
    intro: &'static str,
    root: &'static str,
}

const FORMATS: [Format; 5] = [
    Format {
        title: "Master settings",
        intro: "`muster master --config FILE` reads a JSON object; a flag given too takes \
                precedence over its key.",
        root: "MasterFile",
    },
    Format {
        title: "Queue file",
        intro: "`muster master --queues FILE` reads a JSON list of these. A name with a dot \
                is a child of the queue before the dot (`analytics.etl`); the book's \
                [Queues and preemption](../operator/queues.md) shows trees.",
        root: "QueueSpec",
    },
    Format {
        title: "Job file",
        intro: "`muster job run FILE` reads TOML; the user guide's \
                [Jobs](../user/jobs.md) page walks through one.",
        root: "JobFile",
    },
    Format {
        title: "Simulation trace",
        intro: "`muster simulate TRACE` reads JSON Lines: one object per line, each with \
                `kind` set to one of the kinds below. A file named `*.csv` is read as CSV \
                instead: a header row of these keys (any of them, in any order), then a row \
                per entry, where an empty cell leaves its key out.",
        root: "Entry",
    },
    Format {
        title: "Simulation cluster file",
        intro: "`muster simulate --cluster FILE` reads a JSON object.",
        root: "ClusterFile",
    },
];

/// The types the sources define, by name.
struct Types {
    structs: BTreeMap<String, ItemStruct>,
    enums: BTreeMap<String, ItemEnum>,
}

impl Types {
    fn read(root: &Path) -> Self {
        let mut types = Self {
            structs: BTreeMap::new(),
            enums: BTreeMap::new(),
        };
        for source in SOURCES {
            let text = std::fs::read_to_string(root.join(source)).unwrap();
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{source}: {e}"));
            for item in file.items {
                match item {
                    Item::Struct(s) => {
                        types.structs.insert(s.ident.to_string(), s);
                    }
                    Item::Enum(e) => {
                        types.enums.insert(e.ident.to_string(), e);
                    }
                    _ => {}
                }
            }
        }
        types
    }

    /// A field's description: its doc comment, with `See [`Type::field`]` replaced by that
    /// field's.
    fn field_doc(&self, attrs: &[Attribute]) -> String {
        let doc = doc(attrs);
        match doc
            .strip_prefix("See `")
            .and_then(|rest| rest.strip_suffix("`."))
            .and_then(|path| path.split_once("::"))
        {
            Some((type_name, field)) => {
                let item = &self.structs[type_name];
                let referred = named_fields(item)
                    .find(|f| f.ident.as_ref().is_some_and(|i| i == field))
                    .unwrap_or_else(|| panic!("{doc}: no such field"));
                self.field_doc(&referred.attrs)
            }
            None => doc,
        }
    }
}

/// The page.
pub(super) fn page(root: &Path) -> String {
    let types = Types::read(root);
    let mut page = String::from(
        "# Files\n\n\
         The files Muster reads, key by key. This page is made from the doc comments of the \
         types each file is read into, and a test keeps it so. Every file is checked whole \
         before anything is done with it: an unknown key, a missing one or a bad value is \
         refused with its path (`jobs[0].stages[1].run: ...`).\n",
    );
    // Each type is described once, under the heading of where it first appears; later
    // uses link there.
    let mut planned: BTreeMap<String, String> = BTreeMap::new();
    for format in FORMATS {
        write!(page, "\n## {}\n\n{}\n", format.title, format.intro).unwrap();
        planned.insert(format.root.to_owned(), anchor(format.title));
        let mut queue = VecDeque::from([(None, format.root.to_owned())]);
        while let Some((heading, type_name)) = queue.pop_front() {
            if let Some(heading) = &heading {
                write!(page, "\n### {heading}\n").unwrap();
            }
            let path = heading.as_deref().unwrap_or_default();
            let mut nested = Vec::new();
            types.describe(&mut page, &type_name, path, &mut planned, &mut nested);
            // Depth first: a key's type right after the table that has the key.
            for (heading, type_name) in nested.into_iter().rev() {
                queue.push_front((Some(heading), type_name));
            }
        }
    }
    page
}

impl Types {
    /// Writes the table of `type_name`, and adds the types its keys hold to `nested` with
    /// the headings they get.
    fn describe(
        &self,
        page: &mut String,
        type_name: &str,
        path: &str,
        planned: &mut BTreeMap<String, String>,
        nested: &mut Vec<(String, String)>,
    ) {
        if let Some(item) = self.structs.get(type_name) {
            let container_default = serde_flags(&item.attrs).contains("default");
            write!(page, "\n{}\n", doc(&item.attrs)).unwrap();
            self.fields(
                page,
                named_fields(item),
                container_default,
                path,
                planned,
                nested,
            );
        } else if let Some(item) = self.enums.get(type_name) {
            write!(page, "\n{}\n", doc(&item.attrs)).unwrap();
            let rename = serde_value(&item.attrs, "rename_all");
            if let Some(tag) = serde_value(&item.attrs, "tag") {
                for variant in &item.variants {
                    let kind = renamed(&variant.ident.to_string(), rename.as_deref());
                    write!(
                        page,
                        "\n### Entries of kind `{kind}`\n\n{}\n",
                        doc(&variant.attrs)
                    )
                    .unwrap();
                    write!(page, "\n`\"{tag}\": \"{kind}\"`, and:\n").unwrap();
                    match &variant.fields {
                        Fields::Named(fields) => {
                            self.fields(page, fields.named.iter(), false, path, planned, nested)
                        }
                        Fields::Unnamed(fields) => {
                            let inner = type_name_of(&fields.unnamed[0].ty);
                            let item = &self.structs[&inner];
                            self.fields(page, named_fields(item), false, path, planned, nested)
                        }
                        Fields::Unit => {}
                    }
                }
            } else {
                page.push_str("\n| Value | What it is |\n|---|---|\n");
                for variant in &item.variants {
                    let value = renamed(&variant.ident.to_string(), rename.as_deref());
                    writeln!(page, "| `\"{value}\"` | {} |", cell(&doc(&variant.attrs))).unwrap();
                }
            }
        } else {
            panic!("{type_name} is not defined in the sources the page is made from");
        }
    }

    /// The table of `fields`, keys of `path`.
    fn fields<'f>(
        &self,
        page: &mut String,
        fields: impl Iterator<Item = &'f syn::Field>,
        container_default: bool,
        path: &str,
        planned: &mut BTreeMap<String, String>,
        nested: &mut Vec<(String, String)>,
    ) {
        page.push_str("\n| Key | Type | Required | What it is |\n|---|---|---|---|\n");
        for field in fields {
            let key = field.ident.as_ref().expect("a named field").to_string();
            let optional = container_default
                || serde_flags(&field.attrs).contains("default")
                || serde_value(&field.attrs, "default").is_some()
                || type_name_of(&field.ty) == "Option";
            let key_path = if path.starts_with('`') {
                format!("`{}.{key}`", path.trim_matches('`'))
            } else {
                format!("`{key}`")
            };
            let shown = self.type_cell(&field.ty, &key_path, planned, nested);
            writeln!(
                page,
                "| `{key}` | {shown} | {} | {} |",
                if optional { "no" } else { "yes" },
                cell(&self.field_doc(&field.attrs))
            )
            .unwrap();
        }
    }

    /// How a key of type `ty` at `key_path` is written, linking to the table of a type
    /// described on its own.
    fn type_cell(
        &self,
        ty: &Type,
        key_path: &str,
        planned: &mut BTreeMap<String, String>,
        nested: &mut Vec<(String, String)>,
    ) -> String {
        let name = type_name_of(ty);
        match name.as_str() {
            "bool" => "boolean".into(),
            "u32" | "u64" | "usize" | "i32" => "integer".into(),
            "f64" => "number".into(),
            "String" | "QueueName" => "string".into(),
            "ResourceAmounts" => "object of resource name to amount".into(),
            "BTreeMap" => format!(
                "object of name to {}",
                self.type_cell(&arguments(ty)[1], key_path, planned, nested)
            ),
            "Option" => self.type_cell(&arguments(ty)[0], key_path, planned, nested),
            "Vec" => {
                let item_path = format!("`{}[]`", key_path.trim_matches('`'));
                format!(
                    "list of {}",
                    self.type_cell(&arguments(ty)[0], &item_path, planned, nested)
                )
            }
            _ => {
                let anchor = planned
                    .entry(name.clone())
                    .or_insert_with(|| {
                        nested.push((key_path.to_owned(), name.clone()));
                        anchor(key_path)
                    })
                    .clone();
                let what = if self.enums.contains_key(&name) {
                    "one of these"
                } else {
                    "object"
                };
                format!("[{what}](#{anchor})")
            }
        }
    }
}

/// The named fields of `item`.
fn named_fields(item: &ItemStruct) -> impl Iterator<Item = &syn::Field> {
    match &item.fields {
        Fields::Named(fields) => fields.named.iter(),
        _ => panic!("{} has no named fields", item.ident),
    }
}

/// The last segment of `ty`'s path: `Option` for `Option<u32>`.
fn type_name_of(ty: &Type) -> String {
    match ty {
        Type::Path(path) => path.path.segments.last().unwrap().ident.to_string(),
        _ => panic!("a file's key of an unexpected type"),
    }
}

/// The type arguments of `Option<T>`, `Vec<T>` or `BTreeMap<K, V>`.
fn arguments(ty: &Type) -> Vec<Type> {
    let Type::Path(path) = ty else {
        unreachable!("type_name_of accepted only paths")
    };
    match &path.path.segments.last().unwrap().arguments {
        syn::PathArguments::AngleBracketed(args) => args
            .args
            .iter()
            .map(|arg| match arg {
                syn::GenericArgument::Type(ty) => ty.clone(),
                _ => panic!("a generic argument that is not a type"),
            })
            .collect(),
        _ => panic!("a list, map or option without its types"),
    }
}

/// The doc comment of `attrs`, its lines joined, rustdoc's link brackets dropped.
fn doc(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(lit) => match &lit.lit {
                    Lit::Str(s) => Some(s.value().trim().to_owned()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join(" ").replace("[`", "`").replace("`]", "`")
}

/// The bare words of `#[serde(...)]` on `attrs` (`default`, `deny_unknown_fields`).
fn serde_flags(attrs: &[Attribute]) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if meta.input.peek(syn::Token![=]) {
                let _: Expr = meta.value()?.parse()?;
            } else {
                flags.insert(meta.path.get_ident().unwrap().to_string());
            }
            Ok(())
        })
        .unwrap();
    }
    flags
}

/// The value of `#[serde(name = "...")]` on `attrs`.
fn serde_value(attrs: &[Attribute], name: &str) -> Option<String> {
    let mut value = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(|meta| {
            if meta.input.peek(syn::Token![=]) {
                let lit: syn::LitStr = meta.value()?.parse()?;
                if meta.path.is_ident(name) {
                    value = Some(lit.value());
                }
            }
            Ok(())
        })
        .unwrap();
    }
    value
}

/// `variant` as serde's `rename_all = rule` writes it.
fn renamed(variant: &str, rule: Option<&str>) -> String {
    let mut words: Vec<String> = Vec::new();
    for c in variant.chars() {
        if c.is_uppercase() || words.is_empty() {
            words.push(String::new());
        }
        words.last_mut().unwrap().push(c);
    }
    match rule {
        None => variant.to_owned(),
        Some("lowercase") => variant.to_lowercase(),
        Some("UPPERCASE") => variant.to_uppercase(),
        Some("snake_case") => words.join("_").to_lowercase(),
        Some("SCREAMING_SNAKE_CASE") => words.join("_").to_uppercase(),
        Some(other) => panic!("serde's rename_all = {other:?} is not written here"),
    }
}
