//! The architecture's rules, checked on the source so they cannot quietly
//! erode. Each file under `src/` is read as Rust tokens: comments (doc
//! comments included) and the contents of string and character literals are
//! left out, so the log filter `"info,rmcp=error"` or a sentence about rmcp
//! names nothing.
//!
//! 1. **Only `server/` touches rmcp.** No file under `src/` outside
//!    `src/server/` may contain the identifier `rmcp` (as a path `rmcp::…`, in a
//!    `use rmcp…`, `extern crate rmcp`, or anywhere else). Inside `src/server/`,
//!    an item that exports something beyond `server/` — a `use` or `type`
//!    item that is `pub`, `pub(crate)`, or `pub(super)` in `src/server/mod.rs` —
//!    may not name `rmcp`, nor a capitalised name the same file imports from
//!    rmcp: that would be a re-export of an rmcp type (`pub use
//!    rmcp::model::ErrorData as RequestError`). `pub(in crate::server…)` and
//!    private items are fine. (Public functions of `server/` that take or
//!    return rmcp types are not seen by this rule: the compiler would make code
//!    outside name them, which rule 1 catches.)
//! 2. **The top modules depend on each other one way.** A module `m` is
//!    `src/m.rs` with everything under `src/m/`; it uses module `n` where its
//!    code names `crate::n` (also inside `crate::{…}`). [`ALLOWED`] lists, for
//!    every module `src/lib.rs` declares, the modules it may use; that table
//!    has no cycle, so neither has the code. A new top module must be placed in
//!    the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules each top module may use. Read from the bottom up: nothing
/// depends on a module below it in this list.
const ALLOWED: &[(&str, &[&str])] = &[
    ("sync", &[]),
    ("audit", &[]),
    ("import", &[]),
    ("secret", &["sync"]),
    ("diag", &["secret"]),
    ("uri_template", &[]),
    ("duration", &[]),
    ("telemetry", &["diag", "sync"]),
    ("metrics", &["sync"]),
    ("render", &["diag", "sync"]),
    ("effect", &["diag", "duration", "metrics", "render", "secret", "sync", "telemetry"]),
    ("catalog", &["diag", "duration", "effect", "render", "secret", "uri_template"]),
    ("resource", &["catalog", "effect", "render"]),
    ("content", &["catalog", "render", "resource"]),
    ("prompt", &["catalog", "content", "render"]),
    ("run", &["catalog", "content", "diag", "duration", "effect", "metrics", "render", "secret"]),
    ("task_store", &["run", "sync"]),
    ("live", &["catalog", "render", "resource", "sync"]),
    ("rate_limit", &["catalog", "sync"]),
    ("replicas", &["duration", "effect", "sync", "task_store"]),
    (
        "server",
        &[
            "audit",
            "catalog",
            "content",
            "duration",
            "effect",
            "live",
            "metrics",
            "prompt",
            "rate_limit",
            "render",
            "replicas",
            "resource",
            "run",
            "sync",
            "task_store",
            "telemetry",
            "uri_template",
        ],
    ),
    ("examples", &["catalog", "diag", "run", "server"]),
    ("reload", &["catalog", "diag", "examples", "live", "metrics", "resource", "server", "sync", "telemetry"]),
    ("preview", &["catalog", "diag", "examples", "reload", "run", "secret", "server", "sync"]),
];

/// One token of Rust source: an identifier, a number, `::`, or one
/// punctuation character; with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
}

/// The tokens of `source`, without comments, and with every string and
/// character literal left out whole.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Moves past `count` characters, counting lines.
    let advance = |i: &mut usize, line: &mut usize, count: usize| {
        for _ in 0..count {
            if chars.get(*i) == Some(&'\n') {
                *line += 1;
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            loop {
                match (chars.get(i), chars.get(i + 1)) {
                    (Some('/'), Some('*')) => {
                        depth += 1;
                        advance(&mut i, &mut line, 2);
                    }
                    (Some('*'), Some('/')) => {
                        depth -= 1;
                        advance(&mut i, &mut line, 2);
                        if depth == 0 {
                            break;
                        }
                    }
                    (Some(_), _) => advance(&mut i, &mut line, 1),
                    (None, _) => break,
                }
            }
        } else if c == '"' {
            advance(&mut i, &mut line, 1);
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                advance(&mut i, &mut line, step);
            }
            advance(&mut i, &mut line, 1);
        } else if c == '\'' {
            if next == Some('\\') {
                // An escaped character literal: past the escaped character, up to the closing quote.
                advance(&mut i, &mut line, 3);
                while i < chars.len() && chars[i] != '\'' {
                    advance(&mut i, &mut line, 1);
                }
                advance(&mut i, &mut line, 1);
            } else if chars.get(i + 2) == Some(&'\'') {
                advance(&mut i, &mut line, 3);
            } else {
                // A lifetime or label: the name that follows is lexed next.
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            if raw_prefix && matches!(chars.get(i), Some('"' | '#')) {
                let mut hashes = 0;
                while chars.get(i + hashes) == Some(&'#') {
                    hashes += 1;
                }
                if chars.get(i + hashes) == Some(&'"') {
                    // A raw string: up to `"` and as many `#`.
                    advance(&mut i, &mut line, hashes + 1);
                    while i < chars.len() {
                        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                            advance(&mut i, &mut line, hashes + 1);
                            break;
                        }
                        advance(&mut i, &mut line, 1);
                    }
                    continue;
                }
                if word == "r" && hashes == 1 {
                    // A raw identifier `r#name`: the name is lexed next.
                    i += 1;
                    continue;
                }
            }
            out.push(Token { text: word, line });
        } else if c == ':' && next == Some(':') {
            out.push(Token { text: "::".to_owned(), line });
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token { text: c.to_string(), line });
            }
            advance(&mut i, &mut line, 1);
        }
    }
    out
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display())).path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// `line: the line's text`.
fn place(source: &str, line: usize) -> String {
    format!("{line}: {}", source.lines().nth(line - 1).map_or("", str::trim))
}

/// Where a file outside `server/` names rmcp.
fn rmcp_outside_server(source: &str) -> Vec<String> {
    tokens(source).iter().filter(|token| token.text == "rmcp").map(|token| place(source, token.line)).collect()
}

/// The items (`use …;`, `type … ;`) of `tokens` with the visibility written
/// before them (empty when private) and their tokens.
fn items(tokens: &[Token]) -> Vec<(String, &[Token])> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let mut visibility = String::new();
        let mut j = i;
        if tokens[j].text == "pub" {
            visibility.push_str("pub");
            j += 1;
            if tokens.get(j).is_some_and(|t| t.text == "(") {
                while j < tokens.len() && tokens[j].text != ")" {
                    visibility.push_str(&tokens[j].text);
                    if tokens[j].text == "in" {
                        visibility.push(' ');
                    }
                    j += 1;
                }
                visibility.push(')');
                j += 1;
            }
        }
        if tokens.get(j).is_some_and(|t| t.text == "use" || t.text == "type") {
            let start = j;
            while j < tokens.len() && tokens[j].text != ";" {
                j += 1;
            }
            found.push((visibility, &tokens[start..j.min(tokens.len())]));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    found
}

/// Where a file of `server/` re-exports rmcp beyond `server/`. `is_mod` says
/// it is `src/server/mod.rs`, whose `pub(super)` is the whole crate.
fn rmcp_reexports(source: &str, is_mod: bool) -> Vec<String> {
    let tokens = tokens(source);
    let items = items(&tokens);
    let names_rmcp = |item: &[Token]| item.iter().any(|t| t.text == "rmcp");
    // Capitalised names this file imports from rmcp (types, traits, aliases).
    let imported: BTreeSet<&str> = items
        .iter()
        .filter(|(_, item)| item[0].text == "use" && names_rmcp(item))
        .flat_map(|(_, item)| item.iter())
        .map(|t| t.text.as_str())
        .filter(|text| text.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    items
        .iter()
        .filter(|(visibility, _)| {
            let inside = visibility.is_empty()
                || visibility == "pub(self)"
                || visibility.starts_with("pub(in crate::server")
                || (visibility == "pub(super)" && !is_mod);
            !inside
        })
        .filter(|(_, item)| names_rmcp(item) || item.iter().any(|t| imported.contains(t.text.as_str())))
        .map(|(_, item)| place(source, item[0].line))
        .collect()
}

/// The top modules a module's `source` names, each with the path after
/// `crate::` (e.g. `run::sql::Probe`) and its line.
fn crate_paths(source: &str) -> Vec<(String, usize)> {
    let tokens = tokens(source);
    let mut paths = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if token.text != "crate" || tokens.get(i + 1).is_none_or(|t| t.text != "::") {
            continue;
        }
        // `crate::a::b` or `crate::{a::b, c}`: each path from its first segment.
        let starts: Vec<usize> = if tokens.get(i + 2).is_some_and(|t| t.text == "{") {
            let mut starts = vec![i + 3];
            let mut depth = 0;
            let mut j = i + 2;
            while let Some(t) = tokens.get(j) {
                match t.text.as_str() {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    "," if depth == 1 => starts.push(j + 1),
                    _ => {}
                }
                j += 1;
            }
            starts
        } else {
            vec![i + 2]
        };
        for start in starts {
            let mut path = Vec::new();
            let mut j = start;
            while let Some(t) = tokens.get(j) {
                if !t.text.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    break;
                }
                path.push(t.text.as_str());
                if tokens.get(j + 1).is_none_or(|t| t.text != "::") {
                    break;
                }
                j += 2;
            }
            if !path.is_empty() {
                paths.push((path.join("::"), token.line));
            }
        }
    }
    paths
}

/// The modules `src/lib.rs` declares.
fn top_modules() -> Vec<String> {
    let tokens = tokens(&read(&src().join("lib.rs")));
    tokens.windows(3).filter(|w| w[0].text == "pub" && w[1].text == "mod").map(|w| w[2].text.clone()).collect()
}

#[test]
fn only_server_names_rmcp() {
    let src = src();
    let server = src.join("server");
    let mut problems = Vec::new();
    for file in rust_files(&src) {
        let source = read(&file);
        let relative = file.strip_prefix(&src).unwrap_or(&file).display().to_string();
        let found = if file.starts_with(&server) {
            rmcp_reexports(&source, file == server.join("mod.rs"))
        } else {
            rmcp_outside_server(&source)
        };
        problems.extend(found.into_iter().map(|place| format!("src/{relative}:{place}")));
    }
    assert!(
        problems.is_empty(),
        "only `server/` may name rmcp, and it may not re-export rmcp types beyond itself; \
         give the code outside carte's own types (or JSON) instead:\n{}",
        problems.join("\n")
    );
}

#[test]
fn top_modules_depend_one_way() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let src = src();
    let mut problems = Vec::new();
    for module in top_modules() {
        let Some(may_use) = allowed.get(module.as_str()) else {
            problems.push(format!(
                "src/lib.rs declares `{module}`, which ALLOWED in tests/it/architecture.rs does not place: \
                 add it with the modules it may use"
            ));
            continue;
        };
        let folder = src.join(&module);
        let mut files = if folder.is_dir() { rust_files(&folder) } else { Vec::new() };
        let single = src.join(format!("{module}.rs"));
        if single.is_file() {
            files.push(single);
        }
        for file in files {
            for (path, line) in crate_paths(&read(&file)) {
                let target = path.split("::").next().unwrap_or_default();
                if target != module && !may_use.contains(&target) {
                    let relative = file.strip_prefix(&src).unwrap_or(&file).display().to_string();
                    problems.push(format!(
                        "src/{relative}:{line}: `{module}` uses `crate::{path}`, but it may use only {may_use:?}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "a dependency goes the wrong way:\n{}", problems.join("\n"));
}

#[test]
fn the_allowed_directions_have_no_cycle() {
    // Each module may use only modules listed before it.
    for (index, (module, uses)) in ALLOWED.iter().enumerate() {
        for used in *uses {
            let position = ALLOWED.iter().position(|(m, _)| m == used);
            assert!(
                position.is_some_and(|p| p < index),
                "`{module}` may use `{used}`, which is not listed before it in ALLOWED"
            );
        }
    }
}

#[test]
fn comments_and_literals_name_nothing() {
    let source = "// rmcp::model\n/* rmcp /* nested rmcp */ rmcp */\n/// [`rmcp::X`]\n\
                  let f = \"info,rmcp=error\"; let r = r#\"rmcp::x \"# ; let c = '\"'; let q = '\\'';\n\
                  fn f<'a>(x: &'a str) {}\n";
    assert_eq!(rmcp_outside_server(source), Vec::<String>::new());
    let named = "let c = '\"';\nuse rmcp::model::LoggingLevel;\nfn f() -> ::rmcp::ErrorData {}\n";
    assert_eq!(rmcp_outside_server(named), ["2: use rmcp::model::LoggingLevel;", "3: fn f() -> ::rmcp::ErrorData {}"]);
}

#[test]
fn reexports_of_rmcp_types_are_found() {
    let reexport = "pub use rmcp::model::ErrorData as RequestError;";
    assert_eq!(rmcp_reexports(reexport, true).len(), 1);
    let alias = "use rmcp::model::{ErrorData, Tool};\npub(crate) type RequestError = ErrorData;";
    assert_eq!(rmcp_reexports(alias, false), ["2: pub(crate) type RequestError = ErrorData;"]);
    let inside = "use rmcp::ErrorData;\npub(in crate::server) use rmcp::model::Tool;\npub(super) use rmcp::X;\n\
                  pub use snapshot::{Answer, RequestError};";
    assert_eq!(rmcp_reexports(inside, false), Vec::<String>::new());
    assert_eq!(rmcp_reexports(inside, true).len(), 1, "pub(super) in server/mod.rs reaches the whole crate");
}

#[test]
fn crate_paths_are_read_from_groups_too() {
    let source = "use crate::{catalog::Catalog, render};\nfn f() { crate::run::sql::open(); }\n// crate::server\n";
    let paths = crate_paths(source);
    assert_eq!(paths, [("catalog::Catalog".to_owned(), 1), ("render".to_owned(), 1), ("run::sql::open".to_owned(), 2)]);
}
