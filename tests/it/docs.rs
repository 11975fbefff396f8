//! The docs say what carte does: the README's example is
//! `examples/bookshelf/catalog.yaml` and answers as the README shows (a
//! call, and the diagnostics of two typos); every file the README links to
//! exists; every chapter of the book is in its table of contents, and every
//! entry there is a chapter.

use std::path::Path;

use crate::common::{self, TempDir, run_cli};

fn read(path: &str) -> String {
    std::fs::read_to_string(common::repo_root().join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// The fenced blocks of `markdown` in `language`, in order.
fn blocks<'a>(markdown: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    markdown.split(fence.as_str()).skip(1).filter_map(|rest| rest.split_once("```").map(|(block, _)| block)).collect()
}

/// The output a `console` block shows after its `$ command` line.
fn shown_output(block: &str) -> String {
    block.split_once('\n').map(|(_, output)| output.to_owned()).unwrap_or_default()
}

#[test]
fn the_readmes_example_is_the_bookshelf_and_answers_as_shown() {
    let readme = read("README.md");
    let example = read("examples/bookshelf/catalog.yaml");
    assert_eq!(blocks(&readme, "yaml").first().copied(), Some(example.as_str()), "README's example catalog");
    let consoles = blocks(&readme, "console");
    let [call, check] = consoles.as_slice() else { panic!("two console blocks: {consoles:?}") };

    let path = common::repo_root().join("examples/bookshelf/catalog.yaml");
    let (status, answer, _) = run_cli("call", &path, &["find_books", "text=Tol"], &[]);
    assert_eq!(status, Some(0));
    let printed = serde_json::to_string_pretty(&answer).unwrap() + "\n";
    assert_eq!(printed, shown_output(call), "README's call");

    let dir = TempDir::new("docs-typos");
    let typos = example
        .replacen("        database: shelf\n        statement", "        database: shelv\n        statement", 1)
        .replacen("{{ book.author }}", "{{ boook.author }}", 1);
    let catalog = dir.write("catalog.yaml", &typos);
    let (status, _, diagnostics) = run_cli("check", &catalog, &[], &[]);
    assert_eq!(status, Some(1));
    let diagnostics = diagnostics.replace(&catalog.display().to_string(), "examples/bookshelf/catalog.yaml");
    assert_eq!(diagnostics, shown_output(check), "README's diagnostics");
}

#[test]
fn every_file_the_readme_links_to_exists() {
    let readme = read("README.md");
    let targets: Vec<&str> = readme
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
        .filter(|target| !target.contains("://") && !target.starts_with('#'))
        .collect();
    assert!(targets.len() > 20, "{targets:?}");
    for target in targets {
        assert!(common::repo_root().join(target).exists(), "README links to {target}, which does not exist");
    }
}

#[test]
fn the_books_table_of_contents_and_its_chapters_agree() {
    let book = common::repo_root().join("book/src");
    let summary = read("book/src/SUMMARY.md");
    let listed: Vec<String> = summary
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target.to_owned()))
        .collect();
    for chapter in &listed {
        assert!(book.join(chapter).is_file(), "SUMMARY.md lists {chapter}, which does not exist");
    }
    let mut chapters = Vec::new();
    collect_markdown(&book, &book, &mut chapters);
    for chapter in chapters {
        assert!(chapter == "SUMMARY.md" || listed.contains(&chapter), "{chapter} is not in SUMMARY.md");
    }
}

/// Every `.md` file under `dir`, relative to `root`.
fn collect_markdown(root: &Path, dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_markdown(root, &path, found);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            found.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
        }
    }
}
