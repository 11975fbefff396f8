//! `carte check` as a person runs it: every broken catalog in
//! `tests/catalogs/` is checked by the real binary, and what it prints on
//! stderr is compared, byte for byte, with the `.expected` file beside it.
//!
//! Fixtures are `err_*.yaml` (exit 1) and `warn_*.yaml` (warnings only, exit
//! 0). Each `NAME.expected` holds `exit: N` on its first line, then the full
//! stderr. Run with `CARTE_BLESS=1` to rewrite the expectations from the
//! current output, then read the diff: these files are the messages users see.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common;

/// How long one `carte check` may run before it is killed.
const TIMEOUT: Duration = Duration::from_secs(30);

fn catalogs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/catalogs")
}

/// What one run of the binary produced.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `carte ARGS` in `dir` with a clean `CARTE_*` environment plus `envs`,
/// killing it after [`TIMEOUT`].
fn carte(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_carte"));
    command.args(args).current_dir(dir);
    // Fixtures rely on `CARTE_TEST_UNSET_*` being unset, and `CARTE_LOG`
    // would add log lines to stderr.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CARTE_") {
            command.env_remove(name);
        }
    }
    command.envs(envs.iter().copied());
    let what = format!("`carte {}` in {}", args.join(" "), dir.display());
    let ran = common::run_to_end(&mut command, &what, TIMEOUT);
    let stdout = String::from_utf8(ran.stdout).expect("stdout is not UTF-8");
    let stderr = String::from_utf8(ran.stderr).expect("stderr is not UTF-8");
    Run { code: ran.status.code(), stdout, stderr }
}

/// Runs `carte check FILE` the way the fixtures expect: from `tests/catalogs`,
/// with the relative file name.
fn check(file: &str) -> Run {
    carte(&catalogs_dir(), &["check", file], &[])
}

/// The fixtures `err_*.yaml` and `warn_*.yaml` directly in `tests/catalogs`.
fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(catalogs_dir())
        .expect("cannot list tests/catalogs")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| (name.starts_with("err_") || name.starts_with("warn_")) && name.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}

fn expected_path(fixture: &str) -> PathBuf {
    catalogs_dir().join(fixture.strip_suffix(".yaml").unwrap_or(fixture)).with_extension("expected")
}

fn format_expected(code: Option<i32>, stderr: &str) -> String {
    let code = code.map_or_else(|| "killed".to_owned(), |c| c.to_string());
    format!("exit: {code}\n{stderr}")
}

/// Checks one fixture against its `.expected` file (or rewrites it when
/// blessing). Returns a description of every mismatch.
fn check_fixture(fixture: &str, want_code: i32) -> Option<String> {
    let run = check(fixture);
    let actual = format_expected(run.code, &run.stderr);
    let path = expected_path(fixture);
    let mut problems = Vec::new();
    if common::blessing() {
        std::fs::write(&path, &actual).unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    } else {
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == actual => {}
            Ok(expected) => problems.push(format!(
                "output differs from {} (rerun with CARTE_BLESS=1 to accept it)\n\
                 ----- expected -----\n{expected}\n----- actual -----\n{actual}\n--------------------",
                path.display()
            )),
            Err(err) => problems.push(format!(
                "cannot read {} ({err}); run with CARTE_BLESS=1 to create it\n----- actual -----\n{actual}",
                path.display()
            )),
        }
    }
    if run.code != Some(want_code) {
        problems.push(format!("exit code is {:?}, want {want_code}\n----- stderr -----\n{}", run.code, run.stderr));
    }
    if !run.stdout.is_empty() {
        problems.push(format!("`carte check` wrote to stdout:\n{}", run.stdout));
    }
    if problems.is_empty() { None } else { Some(format!("=== {fixture}\n{}", problems.join("\n"))) }
}

#[test]
fn every_fixture_prints_its_expected_diagnostics() {
    let fixtures = fixtures();
    assert!(fixtures.len() >= 40, "expected the fixtures in tests/catalogs, found {fixtures:?}");
    let mut failures = Vec::new();
    for fixture in &fixtures {
        let want_code = if fixture.starts_with("err_") { 1 } else { 0 };
        failures.extend(check_fixture(fixture, want_code));
    }
    // Every `.expected` file belongs to a fixture (none left behind by a rename).
    for entry in std::fs::read_dir(catalogs_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".expected")
            && !catalogs_dir().join(format!("{stem}.yaml")).is_file()
        {
            failures.push(format!("=== {name}\nno `{stem}.yaml` beside it"));
        }
    }
    // Checking must not leave databases (or anything else) behind.
    for entry in std::fs::read_dir(catalogs_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.contains(".db") {
            failures.push(format!("=== {name}\n`carte check` created a database file in tests/catalogs"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn warning_fixtures_warn_and_error_fixtures_err() {
    // A `warn_` fixture that printed no warning, or an `err_` one without an
    // error, would test nothing; the JSON output says which is which.
    let mut failures = Vec::new();
    for fixture in fixtures() {
        let run = carte(&catalogs_dir(), &["check", "--format", "json", &fixture], &[]);
        let diagnostics: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|err| panic!("{fixture}: --format json printed invalid JSON ({err}):\n{}", run.stdout));
        let severities: BTreeSet<&str> =
            diagnostics.as_array().unwrap().iter().filter_map(|d| d["severity"].as_str()).collect();
        let want = if fixture.starts_with("err_") { "error" } else { "warning" };
        if !severities.contains(want) {
            failures.push(format!("{fixture}: no {want} among {severities:?}"));
        }
        if fixture.starts_with("warn_") && severities.contains("error") {
            failures.push(format!("{fixture}: a warn_ fixture reports an error"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fixtures_cover_every_diagnostic_code() {
    // `invalid-catalog` (serde rejecting what the schema accepted) and
    // `template-file` (an unreadable template file) cannot be produced by a
    // checked-in file.
    const CODES: &[&str] = &[
        "complete-key",
        "step",
        "content-block",
        "database-open",
        "database-setup",
        "database-timeout",
        "database-url",
        "duplicate",
        "duplicate-argument",
        "duplicate-data",
        "duplicate-database",
        "empty-description",
        "env",
        "include",
        "invalid-value",
        "long-name",
        "media",
        "media-data",
        "media-file",
        "mime-type",
        "missing-key",
        "name",
        "not-a-mapping",
        "prompt-messages",
        "resource-body",
        "resource-file",
        "resource-uri",
        "run",
        "schema-invalid",
        "schema-type",
        "server-in-include",
        "sql",
        "sql-parameter",
        "sql-read-only",
        "database-pool",
        "templates-folder",
        "templates-link",
        "template-syntax",
        "unknown-database",
        "unknown-key",
        "unknown-resource",
        "unknown-template",
        "unknown-variable",
        "unused-argument",
        "unused-variable",
        "uri-template",
        "wrong-type",
        "yaml-syntax",
        "yaml-aliases",
        "empty-catalog",
        "not-a-catalog",
        "schema-required",
        "yaml-boolean",
        "cut-by-comment",
        "unquoted-template",
        "yaml-indent",
        "yaml-tag",
        "duplicate-toolset",
        "toolset-name",
        "toolset-tool",
        "toolset-empty",
        "toolset-duplicate",
    ];
    let mut seen = BTreeSet::new();
    for fixture in fixtures() {
        let run = carte(&catalogs_dir(), &["check", "--format", "json", &fixture], &[]);
        let diagnostics: Value = serde_json::from_str(&run.stdout).unwrap();
        for diagnostic in diagnostics.as_array().unwrap() {
            seen.insert(diagnostic["code"].as_str().unwrap().to_owned());
        }
    }
    let missing: Vec<&&str> = CODES.iter().filter(|code| !seen.contains(**code)).collect();
    assert!(missing.is_empty(), "no fixture produces {missing:?}; codes seen: {seen:?}");
}

#[test]
fn json_format_has_every_field() {
    let run = carte(&catalogs_dir(), &["check", "--format", "json", "err_unknown_key.yaml"], &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert_eq!(run.stderr, "", "the JSON format prints nothing on stderr");
    let diagnostics: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|err| panic!("stdout is not JSON ({err}):\n{}", run.stdout));
    let list = diagnostics.as_array().expect("a JSON array");
    assert_eq!(list.len(), 1, "{diagnostics:#}");
    let d = &list[0];
    assert_eq!(d["severity"], "error");
    assert_eq!(d["code"], "unknown-key");
    assert_eq!(d["message"], "unknown key `descripton` in tool `list_rooms`");
    assert_eq!(d["location"]["file"], "err_unknown_key.yaml");
    assert_eq!(d["location"]["line"], 4);
    assert_eq!(d["location"]["column"], 5);
    assert_eq!(d["hint"], "did you mean `description`?");
    assert!(d.get("notes").is_none(), "no notes when there are none: {d:#}");
}

#[test]
fn json_format_has_notes_and_warnings() {
    let run = carte(&catalogs_dir(), &["check", "--format", "json", "err_duplicate_include.yaml"], &[]);
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let diagnostics: Value = serde_json::from_str(&run.stdout).unwrap();
    let first = &diagnostics[0];
    assert_eq!(first["code"], "duplicate");
    assert_eq!(first["message"], "tool `get_quote` is declared twice");
    assert_eq!(first["location"]["file"], "includes/duplicates.yaml");
    assert_eq!((first["location"]["line"].as_u64(), first["location"]["column"].as_u64()), (Some(2), Some(11)));
    assert_eq!(first["notes"][0]["message"], "first declared here");
    assert_eq!(first["notes"][0]["location"]["file"], "err_duplicate_include.yaml");
    assert_eq!(first["notes"][0]["location"]["line"], 5);

    let run = carte(&catalogs_dir(), &["check", "--format", "json", "warn_name_long.yaml"], &[]);
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let diagnostics: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(diagnostics[0]["severity"], "warning");
    assert_eq!(diagnostics[0]["code"], "long-name");
}

#[test]
fn missing_catalog_exits_2() {
    let run = check("no_such_catalog.yaml");
    assert_eq!(run.code, Some(2), "stderr:\n{}", run.stderr);
    assert_eq!(
        run.stderr,
        "no_such_catalog.yaml:1:1: error: cannot read catalog file `no_such_catalog.yaml`: no such file\n\
         \n\
         1 error, 0 warnings\n"
    );

    let run = carte(&catalogs_dir(), &["check", "--format", "json", "no_such_catalog.yaml"], &[]);
    assert_eq!(run.code, Some(2), "stderr:\n{}", run.stderr);
    let diagnostics: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(diagnostics[0]["code"], "unreadable");
}

#[test]
fn shipped_reservo_catalog_is_valid() {
    let run = carte(
        &catalogs_dir(),
        &["check", "../../catalogs/reservo.yaml"],
        &[("RESERVO_DATABASE_URL", "sqlite::memory:")],
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    assert_eq!(run.stderr, "../../catalogs/reservo.yaml: ok\n", "the shipped example has no warnings either");
}
