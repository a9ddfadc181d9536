//! The workspace's module imports run one way: no module of a crate imports one that imports
//! it back, directly or through others. Read from the sources, so a new cycle fails here
//! rather than in a reviewer's head.
//!
//! A module is a source file (`serve/engine.rs` is `serve::engine`). An edge is a `crate::`
//! or `super::` path in it that names another module's item. `lib.rs` and `mod.rs` only
//! declare and re-export, so paths from them, and paths that stop at a re-exporting `mod.rs`,
//! are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The module path of a source file (`serve::engine`); `lib.rs` is the empty path and
/// `serve/mod.rs` is `serve`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The code of a file without comments (doc examples name other crates' paths) and without
/// its `#[cfg(test)] mod tests` (a test may use anything).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands the use-tree starting at `rest` (just after `crate::` or `super::`) into the
/// paths it names, each as its segments.
fn paths_in(rest: &str) -> Vec<Vec<String>> {
    fn tree(
        chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
        prefix: &[String],
    ) -> Vec<Vec<String>> {
        let mut path = prefix.to_vec();
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                chars.next();
            } else if c == ':' {
                chars.next();
                if !word.is_empty() {
                    path.push(std::mem::take(&mut word));
                }
            } else if c == '{' {
                chars.next();
                let mut all = Vec::new();
                loop {
                    while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
                        chars.next();
                    }
                    match chars.peek() {
                        Some('}') => {
                            chars.next();
                            break;
                        }
                        None => break,
                        _ => all.extend(tree(chars, &path)),
                    }
                }
                return all;
            } else {
                break;
            }
        }
        if !word.is_empty() {
            path.push(word);
        }
        vec![path]
    }
    tree(&mut rest.chars().peekable(), &[])
}

/// The modules of one crate and the modules each imports.
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeMap<Vec<String>, &PathBuf> =
        files.iter().map(|f| (module_of(src, f), f)).collect();
    let hubs: BTreeSet<&Vec<String>> = modules
        .iter()
        .filter(|(_, f)| f.ends_with("mod.rs") || f.ends_with("lib.rs"))
        .map(|(m, _)| m)
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        if hubs.contains(module) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).expect("readable source"));
        let mut targets = BTreeSet::new();
        for (anchor, base) in [
            ("crate::", Vec::new()),
            ("super::", module[..module.len() - 1].to_vec()),
        ] {
            for (at, _) in code.match_indices(anchor) {
                // `self::super::` and `crate::` inside another path are not anchors.
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                for tail in paths_in(&code[at + anchor.len()..]) {
                    let mut full = base.clone();
                    full.extend(tail);
                    // The longest prefix that is a module is the one imported.
                    let target = (1..=full.len())
                        .rev()
                        .map(|n| full[..n].to_vec())
                        .find(|p| modules.contains_key(p));
                    if let Some(target) = target
                        && target != *module
                        && !hubs.contains(&target)
                        && !module.starts_with(&target)
                    {
                        targets.insert(target);
                    }
                }
            }
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

/// A cycle through `start`, if any, as the modules on it.
fn cycle_from(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    start: &Vec<String>,
) -> Option<Vec<Vec<String>>> {
    let mut stack = vec![(start.clone(), vec![start.clone()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                return Some(path);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cycles = Vec::new();
    for name in [
        "sluicegate",
        "sluicegate-rules",
        "sluicegate-redis",
        "sluicegate-http",
        "sluicegate-server",
    ] {
        let edges = graph(&crates.join(name).join("src"));
        assert!(edges.len() > 3, "{name}: its modules were not found");
        for module in edges.keys() {
            if let Some(cycle) = cycle_from(&edges, module) {
                let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
                cycles.push(format!("{name}: {}", names.join(" -> ")));
                break;
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_reader_finds_an_import_cycle_when_there_is_one() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::{B, other::X};\n").expect("write");
    std::fs::write(src.join("b.rs"), "pub(crate) fn f() { crate::c::g() }\n").expect("write");
    std::fs::write(src.join("c.rs"), "use crate::{a::A, b};\n").expect("write");
    let edges = graph(src);
    let cycle = cycle_from(&edges, &vec!["a".to_owned()]).expect("a -> b -> c -> a");
    assert_eq!(cycle.len(), 3);
}
