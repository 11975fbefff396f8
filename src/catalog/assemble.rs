//! Reading the root catalog and every file its `include:` globs name, and
//! merging them into one list of declarations, each remembering the file and
//! the place it came from.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::catalog::model::{PromptSpec, ResourceSpec, ResourceTemplateSpec, ServerSpec, ToolSpec};
use crate::catalog::source::{ParsedFile, Positions, parse_file};
use crate::catalog::structure::{Dropped, Entries, check_file};
use crate::diag::escape_pointer;
use crate::diag::{Diagnostic, Location};
use crate::effect::Blocks;
use crate::effect::block::{Block, EachMut, Registered, Stage, Written};

/// The effects' blocks of every file, merged: each entry with where it was
/// declared.
pub struct Gathered;

impl Stage for Gathered {
    type Of<B: Block> = IndexMap<String, Declared<B::Spec>>;
}

/// Adds each block of one file (`from`) to the catalog's.
struct GatherBlocks<'n, 'a> {
    named: &'n mut Named<'a>,
    from: &'n mut Blocks<Written>,
}

impl EachMut<Gathered> for GatherBlocks<'_, '_> {
    fn each<B: Registered>(&mut self, into: &mut IndexMap<String, Declared<B::Spec>>) {
        let entries = std::mem::take(B::of_mut(self.from));
        self.named.add(into, entries, (B::KEY, B::ENTRY, B::DUPLICATE), None);
    }
}

/// Where a declaration was written: which file, and its JSON pointer there.
#[derive(Debug, Clone)]
pub struct Origin {
    /// Index into [`Assembled::files`].
    pub file: usize,
    /// JSON pointer of the declaration in that file.
    pub pointer: String,
}

impl Origin {
    fn new(file: usize, pointer: impl Into<String>) -> Origin {
        Origin { file, pointer: pointer.into() }
    }
}

/// A declaration and where it came from.
#[derive(Debug, Clone)]
pub struct Declared<T> {
    /// Where.
    pub origin: Origin,
    /// What.
    pub spec: T,
}

/// All files of a catalog, merged.
#[derive(Debug, Default)]
pub struct Assembled {
    /// Positions of every file read, root first.
    pub files: Vec<Positions>,
    /// The root file's `server:` block.
    pub server: Option<Declared<ServerSpec>>,
    /// `data:` of every file, merged key by key.
    pub data: Map<String, Value>,
    /// The root file's `skills:` folder, as written.
    pub skills: Option<Declared<String>>,
    /// The effects' blocks (`databases:`, `apis:`), each entry by name.
    pub blocks: Blocks<Gathered>,
    /// Toolsets by name: the tool names each lists.
    pub toolsets: IndexMap<String, Declared<Vec<String>>>,
    /// Tools in order (root first, then includes in glob order).
    pub tools: Vec<Declared<ToolSpec>>,
    /// Prompts in order.
    pub prompts: Vec<Declared<PromptSpec>>,
    /// Resources in order.
    pub resources: Vec<Declared<ResourceSpec>>,
    /// Resource templates in order.
    pub resource_templates: Vec<Declared<ResourceTemplateSpec>>,
    /// Folders that include globs look into.
    pub includes: Vec<super::IncludePattern>,
    /// What each file held when it was read.
    pub contents: Vec<(PathBuf, super::Fingerprint)>,
    /// Declarations left out for their structural mistakes.
    pub dropped: Dropped,
}

impl Assembled {
    /// The location of `pointer` below `origin`.
    pub fn locate(&self, origin: &Origin, below: &str) -> Location {
        self.files[origin.file].locate(&format!("{}{below}", origin.pointer))
    }

    /// Like [`Assembled::locate`], pointing at a key rather than its value.
    pub fn locate_key(&self, origin: &Origin, below: &str) -> Location {
        self.files[origin.file].locate_key(&format!("{}{below}", origin.pointer))
    }

    /// The folder of the file `origin` is in (relative paths resolve there).
    pub fn base_dir(&self, origin: &Origin) -> PathBuf {
        self.files[origin.file].file.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

/// Reads `root` and its includes. Returns `None` if the root itself could not
/// be read; other problems are added to `diagnostics`.
pub fn assemble(
    root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Assembled> {
    let mut assembled = Assembled::default();
    let mut seen = HashSet::new();
    let mut data_origin: IndexMap<String, Origin> = IndexMap::new();
    let mut queue = vec![(root.to_path_buf(), None::<Location>)];
    let mut first = true;
    // Whether any file declares an entry, or could not be read (and might).
    let mut declares = false;
    while let Some((path, included_from)) = queue.pop() {
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if !seen.insert(canonical) {
            continue;
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => {
                assembled.contents.push((path.clone(), super::Fingerprint::of(text.as_bytes())));
                text
            }
            Err(err) => {
                let message = format!("cannot read catalog file `{}`: {}", path.display(), io_reason(&err));
                let diagnostic = match included_from {
                    Some(location) => Diagnostic::error("include", location, message),
                    None => Diagnostic::error("unreadable", Location::file_start(&path), message),
                };
                diagnostics.push(diagnostic);
                if first {
                    return None;
                }
                declares = true;
                continue;
            }
        };
        let file_idx = assembled.files.len();
        let parsed = match parse_file(&path, &text, env) {
            Ok(mut parsed) => {
                diagnostics.append(&mut parsed.problems);
                parsed
            }
            Err(problems) => {
                diagnostics.extend(problems);
                assembled.files.push(Positions::empty(&path));
                first = false;
                declares = true;
                continue;
            }
        };
        // A file with structural mistakes is still merged, without the
        // entries that have them, so later stages check the rest.
        super::lint::lint(&text, &parsed.value, &parsed.positions, diagnostics);
        let checked = check_file(&parsed);
        diagnostics.extend(checked.problems);
        declares |= checked.declares;
        let ParsedFile { value, mut positions, .. } = parsed;
        for (read, written) in checked.renamed {
            positions.rename(read, written);
        }
        let include_is_string = value.get("include").is_some_and(Value::is_string);
        drop(value);
        assembled.files.push(positions);
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let includes = merge(&mut assembled, &mut data_origin, file_idx, checked.entries, first, diagnostics);
        // Includes are read after this file, in the order written.
        let mut found = Vec::new();
        for (idx, pattern) in includes.iter().enumerate() {
            let pointer = if includes.len() == 1 && include_is_string {
                "/include".to_owned()
            } else {
                format!("/include/{idx}")
            };
            let location = assembled.files[file_idx].locate(&pointer);
            match expand_include(&base, pattern, &location, &mut assembled.includes, diagnostics) {
                Some(paths) => found.extend(paths),
                None => declares = true, // what it meant to include may declare something
            }
        }
        for include in found.into_iter().rev() {
            queue.push(include);
        }
        first = false;
    }
    if !declares {
        diagnostics.push(
            Diagnostic::error(
                "empty-catalog",
                Location::file_start(root),
                "this catalog declares nothing: no tool, prompt, resource or resource template",
            )
            .with_hint("add `tools:`, `prompts:` or `resources:`, e.g. `tools: [{ name: hello, description: Says hello., run: { text: Hello! } }]`"),
        );
    }
    Some(assembled)
}

/// Why a file could not be read, in a few plain words.
pub fn io_reason(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => err.to_string(),
    }
}

fn expand_include(
    base: &Path,
    pattern: &str,
    location: &Location,
    includes: &mut Vec<super::IncludePattern>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Vec<(PathBuf, Option<Location>)>> {
    let full = if Path::new(pattern).is_absolute() { PathBuf::from(pattern) } else { base.join(pattern) };
    let is_glob = pattern.contains(['*', '?', '[']);
    // Watch the deepest folder without glob characters: new matches appear there.
    let folder: PathBuf = full
        .ancestors()
        .find(|a| !a.to_string_lossy().contains(['*', '?', '[']) && a != &full)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| base.to_path_buf());
    let include = super::IncludePattern { folder, pattern: full.to_string_lossy().into_owned() };
    if !includes.contains(&include) {
        includes.push(include);
    }
    if !is_glob {
        return Some(vec![(full, Some(location.clone()))]);
    }
    let paths = match glob::glob(&full.to_string_lossy()) {
        Ok(paths) => paths,
        Err(err) => {
            diagnostics.push(
                Diagnostic::error(
                    "include",
                    location.clone(),
                    format!("invalid include pattern `{pattern}`: {}", err.msg),
                )
                .with_hint("use `*` for any name and `**` for any folder depth, e.g. `tools/*.yaml`"),
            );
            return None;
        }
    };
    let matched: Vec<_> =
        paths.filter_map(Result::ok).filter(|p| p.is_file()).map(|p| (p, Some(location.clone()))).collect();
    if matched.is_empty() {
        diagnostics.push(
            Diagnostic::warning("include", location.clone(), format!("include pattern `{pattern}` matches no files"))
                .with_hint(format!(
                    "it is resolved relative to `{}`",
                    if base.as_os_str().is_empty() { Path::new(".") } else { base }.display()
                )),
        );
    }
    Some(matched)
}

/// A block only the root catalog may hold (`key`: `server`, `skills`) as
/// declared in file `file_idx`; in an included file it is the error `code`.
fn root_only<T>(
    assembled: &Assembled,
    (file_idx, is_root): (usize, bool),
    (key, code): (&str, &'static str),
    block: Option<T>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Declared<T>> {
    let spec = block?;
    let origin = Origin::new(file_idx, format!("/{key}"));
    if is_root {
        return Some(Declared { origin, spec });
    }
    diagnostics.push(
        Diagnostic::error(
            code,
            assembled.locate_key(&origin, ""),
            format!("`{key}:` belongs in the root catalog, not in an included file"),
        )
        .with_hint("move this block to the catalog file you pass to `carte serve`"),
    );
    None
}

/// Adds one file's declarations; returns its include patterns.
fn merge(
    assembled: &mut Assembled,
    data_origin: &mut IndexMap<String, Origin>,
    file_idx: usize,
    mut file: Entries,
    is_root: bool,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<String> {
    assembled.dropped.merge(file.dropped);
    let place = (file_idx, is_root);
    if let Some(server) = root_only(assembled, place, ("server", "server-in-include"), file.server, diagnostics) {
        assembled.server = Some(server);
    }
    if let Some(skills) = root_only(assembled, place, ("skills", "skills-in-include"), file.skills, diagnostics) {
        assembled.skills = Some(skills);
    }
    for (key, value) in file.data {
        let origin = Origin::new(file_idx, format!("/data/{}", escape_pointer(&key)));
        if let Some(previous) = data_origin.get(&key) {
            diagnostics.push(
                Diagnostic::error(
                    "duplicate-data",
                    assembled.locate_key(&origin, ""),
                    format!("`data.{key}` is defined twice"),
                )
                .with_note("first defined here", assembled.locate_key(previous, ""))
                .with_hint("each top-level key of `data:` may be defined in one file only"),
            );
            continue;
        }
        data_origin.insert(key.clone(), origin);
        assembled.data.insert(key, value);
    }
    let files = &assembled.files;
    let mut named = Named { files, file: file_idx, diagnostics };
    assembled.blocks.each_mut(&mut GatherBlocks { named: &mut named, from: &mut file.blocks });
    let hint = Some("list all of its tools in one place, or give one of them another name");
    named.add(&mut assembled.toolsets, file.toolsets, ("toolsets", "toolset", "duplicate-toolset"), hint);
    assembled.tools.reserve(file.tools.len());
    for (idx, spec) in file.tools {
        assembled.tools.push(Declared { origin: Origin::new(file_idx, format!("/tools/{idx}")), spec });
    }
    assembled.prompts.reserve(file.prompts.len());
    for (idx, spec) in file.prompts {
        assembled.prompts.push(Declared { origin: Origin::new(file_idx, format!("/prompts/{idx}")), spec });
    }
    for (idx, spec) in file.resources {
        assembled.resources.push(Declared { origin: Origin::new(file_idx, format!("/resources/{idx}")), spec });
    }
    for (idx, spec) in file.resource_templates {
        assembled
            .resource_templates
            .push(Declared { origin: Origin::new(file_idx, format!("/resourceTemplates/{idx}")), spec });
    }
    file.include
}

/// One file's part in adding named declarations (`databases:`, `apis:`,
/// `toolsets:`) to what is assembled.
struct Named<'a> {
    files: &'a [Positions],
    file: usize,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl Named<'_> {
    /// Adds `entries` of the file's `section` (each a `what`) to `into`; a
    /// name declared before is a `code` error at the new key, with a note
    /// at the first.
    fn add<T>(
        &mut self,
        into: &mut IndexMap<String, Declared<T>>,
        entries: impl IntoIterator<Item = (String, T)>,
        (section, what, code): (&str, &str, &'static str),
        hint: Option<&str>,
    ) {
        let files = self.files;
        let locate = |origin: &Origin| files[origin.file].locate_key(&origin.pointer);
        for (name, spec) in entries {
            let origin = Origin::new(self.file, format!("/{section}/{}", escape_pointer(&name)));
            if let Some(previous) = into.get(&name) {
                let mut diagnostic =
                    Diagnostic::error(code, locate(&origin), format!("{what} `{name}` is defined twice"))
                        .with_note("first defined here", locate(&previous.origin));
                if let Some(hint) = hint {
                    diagnostic = diagnostic.with_hint(hint);
                }
                self.diagnostics.push(diagnostic);
                continue;
            }
            into.insert(name, Declared { origin, spec });
        }
    }
}
