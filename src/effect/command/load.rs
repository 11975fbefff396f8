//! The `command` effect's load-time checks of paths, limits and argv: where
//! `argv[0]` is (on PATH, or a path beside the catalog, executable), that
//! `cwd` is a folder, and that `timeout` is in range. Messages name paths
//! as the catalog's author wrote them. An argv template that may start
//! with a client's text before any `--` is warned about (`command-option`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::MAX_TIMEOUT;
use crate::duration::{DurationSpec, positive_at_most};
use crate::effect::Check;

/// Finds `argv[0]`: a path (with `/`) relative to `folder`, or a name on
/// PATH; reports why not at `argv/0`.
pub(super) fn find_program(name: &str, folder: &Path, shown: &Shown<'_>, check: &mut Check<'_>) -> Option<PathBuf> {
    const POINTER: &str = "/run/command/argv/0";
    if is_template(name) {
        check.error("command-program", POINTER, "the program (`argv[0]`) cannot be a template").hint = Some(
            "write the program itself (no argument may choose which program runs); templates go in the later elements of `argv`".to_owned(),
        );
        return None;
    }
    if name.is_empty() {
        check.error("command-program", POINTER, "the program (`argv[0]`) is empty").hint =
            Some("name a program on PATH (`wc`) or a path beside the catalog (`./bin/tool`)".to_owned());
        return None;
    }
    if name.contains('/') {
        let path = folder.join(name);
        return match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && is_executable(&meta) => Some(path),
            Ok(meta) if meta.is_file() => {
                check.error("command-program", POINTER, format!("`{name}` is not executable")).hint =
                    Some(format!("make it executable: `chmod +x {}`", shown.folder.join(name).display()));
                None
            }
            Ok(_) => {
                check.error("command-program", POINTER, format!("`{name}` is a folder, not a program")).hint =
                    Some("name the program file inside it".to_owned());
                None
            }
            Err(_) => {
                check.error("command-program", POINTER, format!("program `{name}` not found")).hint = Some(format!(
                    "a path with `/` is relative to the folder of `{}`; there is no `{}`",
                    shown.file.display(),
                    shown.folder.join(name).display()
                ));
                None
            }
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|meta| meta.is_file() && is_executable(&meta)));
    if found.is_none() {
        check.error("command-program", POINTER, format!("program `{name}` not found on PATH")).hint = Some(format!(
            "install it, or check the spelling; a program beside the catalog is written as a path: `./{name}`"
        ));
    }
    found.map(|found| std::path::absolute(&found).unwrap_or(found))
}

fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o111 != 0
}

/// Paths as the person who wrote the catalog reads them.
pub(super) struct Shown<'a> {
    /// The catalog file, as named in diagnostics.
    pub(super) file: &'a Path,
    /// Its folder, as named in diagnostics (empty for the current one).
    pub(super) folder: &'a Path,
}

/// `cwd` relative to `folder` (default `folder`), if it is a folder.
pub(super) fn check_cwd(cwd: Option<&str>, folder: &Path, shown: &Shown<'_>, check: &mut Check<'_>) -> Option<PathBuf> {
    let Some(cwd) = cwd else { return Some(folder.to_path_buf()) };
    let path = folder.join(cwd);
    if path.is_dir() {
        return Some(path);
    }
    let message =
        if path.exists() { format!("`cwd` `{cwd}` is not a folder") } else { format!("`cwd` `{cwd}` does not exist") };
    check.error("command-cwd", "/run/command/cwd", message).hint = Some(format!(
        "`cwd` is relative to the folder of `{}`: create `{}`, or fix the path",
        shown.file.display(),
        shown.folder.join(cwd).display()
    ));
    None
}

/// A `timeout`: more than zero, at most [`MAX_TIMEOUT`].
pub(super) fn check_timeout(spec: &DurationSpec) -> Result<Duration, String> {
    positive_at_most(spec, MAX_TIMEOUT, "a timeout", "kill every run")
}

/// Whether what `source` renders may start with text a client chose: it
/// starts with a `{{ … }}` that is not a quoted literal (`{{ '--stable' if
/// … }}` is the author's choice), and names an argument the client may send
/// as any text (`free_text`, or `arguments`).
pub(super) fn starts_with_client_text(source: &str, free_text: &[String]) -> bool {
    let Some(expression) = source.trim_start().strip_prefix("{{") else { return false };
    let expression = expression.trim_start_matches(['-', '+']).trim_start();
    if expression.starts_with(['\'', '"']) || free_text.is_empty() {
        return false;
    }
    let env = minijinja::Environment::new();
    let Ok(template) = env.template_from_str(source) else { return false };
    let names = template.undeclared_variables(false);
    names.contains("arguments") || free_text.iter().any(|name| names.contains(name))
}

/// Warns that `argv[idx]`, a template before any `--`, may start with `-`:
/// a client could hand the program an option (`--output=…`) instead of an
/// operand.
pub(super) fn option_injection(check: &mut Check<'_>, idx: usize, program: &str, source: &str) {
    let message = format!(
        "`argv[{idx}]` (`{source}`) starts with a value a client chooses, before any `--`: a value such as \
         `--version` or `--output=…` reaches `{program}` as an option"
    );
    check.warning("command-option", &format!("/run/command/argv/{idx}"), message).hint = Some(format!(
        "put `--` before it, so `{program}` reads what follows as operands (`argv: [{program}, --, \"{source}\"]`), \
         or start it with text, e.g. `./{source}` for a file"
    ));
}

/// Whether `text` has template syntax (else it is used as written).
pub(super) fn is_template(text: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|mark| text.contains(mark))
}
