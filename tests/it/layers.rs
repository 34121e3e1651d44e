//! The layer order of `src/lib.rs`, enforced: its table lists paycred's top-level modules a
//! layer a line, top first, and a module may import only modules of the layers below its
//! own. This test reads that table and every file under `src/` (production and test code)
//! and fails, naming file and line, on an import of a module in the same layer or above.
//!
//! An import is a path through the crate root: `crate::name`, the names of a
//! `crate::{…}` group, or `super::` climbing out of the top-level module. Comments are
//! left out; text in string literals is not parsed apart, so a string that spells
//! `crate::name` counts as an import too (none does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers of `src/lib.rs`'s ```text table: each line that starts with a name opens a
/// layer, its names being the words before the description (two spaces or more apart).
fn layers(lib: &str) -> Vec<Vec<String>> {
    let table = lib
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(""))
        .skip_while(|l| l.trim() != "```text")
        .skip(1)
        .take_while(|l| l.trim() != "```");
    let mut layers = Vec::new();
    for line in table {
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.is_empty() || line.starts_with(' ') {
            continue;
        }
        let names = line.split("  ").next().unwrap_or("");
        let layer: Vec<String> = names
            .split_whitespace()
            .map(|n| n.trim_end_matches('/').to_string())
            .collect();
        assert!(
            layer
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')),
            "src/lib.rs: a layer line of the table names something that is not a module: {line:?}"
        );
        layers.push(layer);
    }
    layers
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// A line without its `//` comment (a `//` inside a string literal is kept).
fn code(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut quotes = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => quotes += 1,
            b'/' if quotes % 2 == 0 && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a line of a file at `depth` (modules below the crate root: 1 for
/// `src/edge.rs` or `src/edge/mod.rs`, 2 for `src/edge/gateway.rs`) imports.
fn imports(line: &str, depth: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a::b, c}`: the names at the group's first level.
            let mut level = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        found.push(ident(&group[i..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(after).to_string());
        }
    }
    // `super::…` that climbs out of the top-level module names a module of the root.
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().last();
        let mut chain = &rest[at..];
        rest = &rest[at + "super::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut climbs = 0;
        while let Some(next) = chain.strip_prefix("super::") {
            climbs += 1;
            chain = next;
        }
        if climbs >= depth {
            found.push(ident(chain).to_string());
        }
    }
    found
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let layers = layers(&lib);
    let mut rank = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for name in layer {
            assert!(
                rank.insert(name.clone(), i).is_none(),
                "src/lib.rs: `{name}` is in two layers"
            );
        }
    }
    // The table names every module of the crate root, and only those.
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    for name in &declared {
        assert!(
            rank.contains_key(name),
            "src/lib.rs: module `{name}` is in no layer"
        );
    }
    for name in rank.keys() {
        assert!(
            declared.contains(name),
            "src/lib.rs: the layer table names `{name}`, which is not a module"
        );
    }

    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap();
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let Some(&own) = rank.get(&parts[0]) else {
            continue; // lib.rs, main.rs
        };
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod"));
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let line = code(line);
            for name in imports(line, depth) {
                let Some(&theirs) = rank.get(&name) else {
                    continue;
                };
                checked += 1;
                if name != parts[0] && theirs <= own {
                    wrong.push(format!(
                        "src/{}:{}: `{}` (layer {}) imports `{name}` (layer {theirs})",
                        rel.display(),
                        n + 1,
                        parts[0],
                        own + 1,
                        theirs = theirs + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked > 500,
        "only {checked} imports were read: is the parser broken?"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layer order of src/lib.rs:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_parser_reads_each_form_of_import() {
    assert_eq!(imports("use crate::store::Store;", 2), ["store"]);
    assert_eq!(
        imports("use crate::{app::App, error::{ApiError, Kind}, http};", 2),
        ["app", "error", "http"]
    );
    assert_eq!(imports("let x = crate::clock::now();", 1), ["clock"]);
    assert!(imports("pub(crate) fn f() {}", 1).is_empty());
    assert!(imports("$crate::x!()", 1).is_empty());
    // From src/edge/gateway.rs (depth 2), `super::super::x` is the root's `x`.
    assert_eq!(imports("use super::super::proxy::Proxy;", 2), ["proxy"]);
    assert!(imports("use super::routes;", 2).is_empty());
    assert_eq!(
        code("let u = \"http://x\"; // crate::edge"),
        "let u = \"http://x\"; "
    );
    let table =
        "//! ```text\n//! a/ b    top\n//!        more of it\n//! c\n//!        d\n//! ```\n";
    assert_eq!(layers(table), [vec!["a", "b"], vec!["c"]]);
}
