//! The book in `docs/` and the README that leads into it: every page is in the book's table
//! of contents, every link between pages (and to a heading of one) leads somewhere, and the
//! README stays short and names the test command CI runs.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn book() -> PathBuf {
    root().join("docs/src")
}

/// Every Markdown page under `dir`.
fn pages(dir: &Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages.extend(self::pages(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// The text of `markdown` outside fenced code blocks and inline code.
fn prose(markdown: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Inline code is every other piece between backticks.
            for (i, piece) in line.split('`').enumerate() {
                if i % 2 == 0 {
                    prose.push_str(piece);
                }
            }
            prose.push('\n');
        }
    }
    prose
}

/// The targets of the Markdown links (`[text](target)`, images too) in `markdown`'s prose.
fn links(markdown: &str) -> Vec<String> {
    let prose = prose(markdown);
    let mut links = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            links.push(rest[..end].to_owned());
        }
    }
    links
}

/// The ids mdBook gives the headings of `markdown`: their text, inline code included,
/// lower case, spaces as dashes, other punctuation dropped.
fn heading_ids(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut ids = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        ids.insert(
            heading
                .trim_start_matches('#')
                .trim()
                .chars()
                .filter_map(|c| match c {
                    c if c.is_alphanumeric() || c == '_' || c == '-' => {
                        Some(c.to_ascii_lowercase())
                    }
                    c if c.is_whitespace() => Some('-'),
                    _ => None,
                })
                .collect(),
        );
    }
    ids
}

#[test]
fn every_page_of_the_book_is_in_its_table_of_contents_and_every_entry_exists() {
    let summary = fs::read_to_string(book().join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary)
        .iter()
        .map(|target| book().join(target))
        .collect();
    for entry in &listed {
        assert!(
            entry.is_file(),
            "SUMMARY.md lists {}, which is missing",
            entry.display()
        );
    }
    for page in pages(&book()) {
        if page.ends_with("SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page),
            "{} is not in SUMMARY.md",
            page.display()
        );
    }
}

#[test]
fn every_link_in_the_book_and_the_readme_leads_to_a_file_and_heading_that_exist() {
    let mut checked = 0;
    for page in pages(&book()).into_iter().chain([root().join("README.md")]) {
        let text = fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.starts_with("https://") || link.starts_with("http://") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            assert!(
                target.exists(),
                "{}: the link `{link}` leads to no file",
                page.display()
            );
            if !anchor.is_empty() {
                let ids = heading_ids(&fs::read_to_string(&target).unwrap());
                assert!(
                    ids.contains(anchor),
                    "{}: the link `{link}` names no heading of {} (it has {ids:?})",
                    page.display(),
                    target.display()
                );
            }
            checked += 1;
        }
        // A page that includes another names a file that exists.
        for line in text.lines() {
            if let Some(included) = line
                .trim()
                .strip_prefix("{{#include ")
                .and_then(|rest| rest.strip_suffix("}}"))
            {
                assert!(
                    dir.join(included).is_file(),
                    "{}: includes {included}, which is missing",
                    page.display()
                );
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} links found: the parser lost them"
    );
}

#[test]
fn the_readme_is_short_and_names_the_test_command_ci_runs() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 150,
        "the README has {lines} lines; the book holds the rest"
    );
    let ci = fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = "cargo test --workspace --locked";
    assert!(
        readme.contains(&format!("\n{command}\n")),
        "the README names `{command}`"
    );
    assert_eq!(
        ci.lines().last(),
        Some(command),
        "CI's last step is the README's test command"
    );
}
