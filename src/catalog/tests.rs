//! Unit tests of `catalog`.

use std::path::PathBuf;

use super::*;

/// A scratch folder (removed when dropped).
struct Folder(tempfile::TempDir);

impl Folder {
    fn new() -> Folder {
        Folder(tempfile::tempdir().unwrap())
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

#[test]
fn a_load_records_what_it_read_from_every_file() {
    let folder = Folder::new();
    let root = folder.write(
            "catalog.yaml",
            "server: { name: t, version: 1.0.0 }\ninclude: [\"tools/*.yaml\"]\nresources:\n  - { uri: \"file:///notes\", name: notes, file: notes.txt, mimeType: text/plain }\nprompts:\n  - { name: hi, description: Hi., messages: [{ role: user, template: hi.j2 }] }\n",
        );
    let tool = folder.write("tools/a.yaml", "tools:\n  - { name: a, description: A., run: { text: a } }\n");
    let notes = folder.write("notes.txt", "some notes");
    let template = folder.write("templates/hi.j2", "Hello.");
    let loaded = load_with(&root, &|_| None, None);
    assert!(loaded.catalog.is_some(), "{:?}", loaded.diagnostics);
    for file in [&root, &tool, &notes, &template] {
        let bytes = std::fs::read(file).unwrap();
        assert!(loaded.inputs.files.contains(file), "{} is not an input", file.display());
        assert!(
            loaded.inputs.contents.contains(&(file.clone(), Fingerprint::of(&bytes))),
            "what was read from {} is not recorded: {:?}",
            file.display(),
            loaded.inputs.contents
        );
    }
    assert_eq!(loaded.inputs.changed(), None);
    assert_eq!(loaded.inputs.len_read(&notes), Some("some notes".len() as u64));
}

#[test]
fn a_catalog_that_declares_nothing_is_an_error() {
    let folder = Folder::new();
    for text in ["", "# only a comment\n", "---\n", "server: { name: b }\n", "tools: []\nprompts:\n"] {
        let root = folder.write("catalog.yaml", text);
        let loaded = load_with(&root, &|_| None, None);
        assert!(loaded.catalog.is_none(), "{text:?} was accepted");
        let codes: Vec<(&str, usize, usize)> =
            loaded.diagnostics.iter().map(|d| (d.code, d.location.line, d.location.column)).collect();
        assert_eq!(codes, [("empty-catalog", 1, 1)], "{text:?}");
    }
    // Entries in an included file count, and so does an entry with a mistake.
    folder.write("more.yaml", "resources:\n  - { uri: \"x://a\", name: a, text: a }\n");
    let root = folder.write("catalog.yaml", "include: more.yaml\n");
    assert!(load_with(&root, &|_| None, None).catalog.is_some());
    let root = folder.write("catalog.yaml", "tools:\n  - { name: a }\n");
    let loaded = load_with(&root, &|_| None, None);
    assert!(loaded.diagnostics.iter().all(|d| d.code != "empty-catalog"), "{:?}", loaded.diagnostics);
}

#[test]
fn required_names_a_declared_property_at_every_level() {
    let folder = Folder::new();
    let tool = |schema: &str| {
        format!(
            "tools:\n  - name: t\n    description: T.\n    inputSchema: {schema}\n    run: {{ text: \"{{{{ arguments }}}}\" }}\n"
        )
    };
    let cases = [
        ("{ type: object, properties: { a: { type: object, properties: { b: {} }, required: [c] } } }", 1),
        ("{ type: object, properties: { a: { type: array, items: { type: object, required: [x] } } } }", 1),
        ("{ type: object, properties: { a: {} }, required: [a] }", 0),
        // Other keywords may declare it: left alone.
        ("{ type: object, allOf: [{ properties: { a: {} } }], required: [a] }", 0),
        ("{ type: object, additionalProperties: { type: string }, required: [a] }", 0),
    ];
    for (schema, errors) in cases {
        let root = folder.write("catalog.yaml", &tool(schema));
        let loaded = load_with(&root, &|_| None, None);
        let found = loaded.diagnostics.iter().filter(|d| d.code == "schema-required").count();
        assert_eq!(found, errors, "{schema}: {:?}", loaded.diagnostics);
        assert_eq!(loaded.catalog.is_some(), errors == 0, "{schema}: {:?}", loaded.diagnostics);
    }
}

#[test]
fn an_entry_left_out_for_a_mistake_is_not_blamed_again() {
    let folder = Folder::new();
    let root = folder.write(
            "catalog.yaml",
            "databases:\n  db: { url: 5 }\ntools:\n  - { name: q, description: Q., run: { sql: { database: db, statement: SELECT 1 } } }\nresources:\n  - { uri: \"x://menu\", name: menu, text: [oops] }\nprompts:\n  - { name: p, description: P., messages: [{ role: user, resource: \"x://menu\" }] }\n",
        );
    let loaded = load_with(&root, &|_| None, None);
    let codes: Vec<&str> = loaded.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["wrong-type", "wrong-type"], "{:?}", loaded.diagnostics);
}

#[test]
fn any_change_since_reading_is_noticed() {
    let folder = Folder::new();
    let path = folder.write("a.txt", "one");
    let mut inputs = Inputs::default();
    inputs.record(&path, b"one");
    assert_eq!(inputs.changed(), None);
    for now in ["two", "", "one more"] {
        std::fs::write(&path, now).unwrap();
        assert_eq!(inputs.changed(), Some(path.as_path()), "after writing {now:?}");
    }
    std::fs::remove_file(&path).unwrap();
    assert_eq!(inputs.changed(), Some(path.as_path()), "after removing it");
    std::fs::write(&path, "one").unwrap();
    assert_eq!(inputs.changed(), None);
    // A file read twice, once before a change and once after: the first read no longer holds.
    std::fs::write(&path, "new").unwrap();
    inputs.record(&path, b"new");
    assert_eq!(inputs.files, std::slice::from_ref(&path));
    assert_eq!(inputs.changed(), Some(path.as_path()));
}
