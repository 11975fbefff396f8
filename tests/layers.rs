//! Dependencies between carte's modules go one way: `duration` and
//! `effect` are below `catalog`, which is below `run` and `server`. Each
//! effect (`src/effect/`) owns its keys, checks and run without knowing the
//! catalog that declares it or the code that calls it, and the catalog
//! never reaches into running. This reads the sources (outside comments)
//! for paths that would break that.

mod common;

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Where files under `dir` (a file or a folder of `src/`) name one of the
/// modules `forbidden` (`crate::run`, or `run` inside `crate::{…}`), as
/// `file:line: text`.
fn uses_of(dir: &str, forbidden: &[&str]) -> Vec<String> {
    let root = common::repo_root().join("src").join(dir);
    let files = if root.is_dir() { rust_files(&root) } else { vec![root] };
    assert!(!files.is_empty() && files.iter().all(|f| f.exists()), "no sources under src/{dir}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (idx, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let grouped = code.split_once("crate::{").map(|(_, rest)| rest.split('}').next().unwrap_or_default());
            for module in forbidden {
                let direct = [format!("crate::{module}::"), format!("crate::{module};")];
                let in_group = grouped.is_some_and(|group| {
                    group
                        .split(',')
                        .any(|item| item.trim() == *module || item.trim().starts_with(&format!("{module}::")))
                });
                if direct.iter().any(|d| code.contains(d.as_str())) || in_group {
                    found.push(format!("{}:{}: {}", file.display(), idx + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn effects_know_neither_the_catalog_nor_their_callers() {
    let found = uses_of("effect", &["catalog", "run", "server", "reload", "content", "prompt", "resource"]);
    assert!(found.is_empty(), "src/effect/ must not depend on these:\n{}", found.join("\n"));
}

#[test]
fn the_catalog_never_reaches_into_running_or_serving() {
    let found = uses_of("catalog", &["run", "server", "reload"]);
    assert!(found.is_empty(), "src/catalog/ must not depend on these:\n{}", found.join("\n"));
}

#[test]
fn durations_are_a_leaf() {
    let found = uses_of("duration.rs", &["catalog", "effect", "run", "server", "reload", "render"]);
    assert!(found.is_empty(), "src/duration.rs must not depend on these:\n{}", found.join("\n"));
}
