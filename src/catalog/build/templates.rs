//! Templates: the templates folder, inline and file templates, their
//! syntax and the variables they use, and content blocks.

use std::ops::Range;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::catalog::assemble::Origin;
use crate::catalog::model::{ContentSpec, MediaSpec};
use crate::catalog::{Block, MediaKind};
use crate::diag::{Diagnostic, Location, suggest};
use crate::render;

use super::resources::guess_mime;
use super::{Builder, Scope, present, read_limited, scalar_map, template_analysis};

impl Builder<'_> {
    /// The templates folder the catalog asks for, whether it exists or not.
    pub(super) fn configured_templates_dir(&self) -> PathBuf {
        match self.assembled.server.as_ref().and_then(|s| s.spec.templates.as_ref().map(|t| (s, t))) {
            Some((server, templates)) => self.assembled.base_dir(&server.origin).join(templates),
            None => self.assembled.files[0].file.parent().map(Path::to_path_buf).unwrap_or_default().join("templates"),
        }
    }

    /// Reads every file of the templates folder into the environment.
    pub(super) fn load_template_files(&mut self) {
        let dir = self.configured_templates_dir();
        let explicit = self.assembled.server.as_ref().filter(|s| s.spec.templates.is_some()).map(|s| s.origin.clone());
        if !dir.is_dir() {
            if let Some(origin) = explicit {
                let location = self.assembled.locate(&origin, "/templates");
                self.error(
                    "templates-folder",
                    location,
                    format!("templates folder `{}` does not exist", dir.display()),
                )
                .hint = Some("the path is relative to the catalog file; create the folder or fix the path".to_owned());
            }
            return;
        }
        self.templates_dir = Some(dir.clone());
        // Links are followed only where they stay inside the folder: one
        // leading out (to a file or a folder) is skipped with a warning, so a
        // catalog cannot have carte read, and serve, files beside it was not
        // given. (A warning, not an error: the catalog stays valid, and a
        // template that needed the link is reported as unknown where it is used.)
        let Ok(root) = dir.canonicalize() else { return };
        let link_location = match &explicit {
            Some(origin) => self.assembled.locate(origin, "/templates"),
            // Never the link itself: rendering a location prints its line.
            None => Location::file_start(&self.assembled.files[0].file),
        };
        // Each folder with the real folders from the root down to it: a link
        // back to one of them would walk forever.
        let mut stack = vec![(dir.clone(), vec![root.clone()])];
        let mut found = Vec::new();
        while let Some((folder, ancestors)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&folder) else { continue };
            let mut entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
            entries.sort_by_key(std::fs::DirEntry::file_name); // warnings in a stable order
            for entry in entries {
                let path = entry.path();
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                let Ok(kind) = entry.file_type() else { continue };
                if hidden {
                    continue;
                }
                let target = if kind.is_symlink() {
                    let Ok(real) = path.canonicalize() else { continue }; // dangling: no file
                    if !real.starts_with(&root) {
                        let shown = path.strip_prefix(&dir).unwrap_or(&path).display().to_string();
                        let points_to = std::fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
                        self.warn(
                            "templates-link",
                            link_location.clone(),
                            format!(
                                "`{shown}` in the templates folder links outside it (to `{points_to}`); it is not read"
                            ),
                        )
                        .hint = Some(
                            "copy the file into the templates folder, or point `templates:` at a folder holding both"
                                .to_owned(),
                        );
                        continue;
                    }
                    real
                } else {
                    path.clone()
                };
                let Ok(metadata) = std::fs::metadata(&target) else { continue };
                if metadata.is_dir() {
                    let Ok(real) = target.canonicalize() else { continue };
                    if !ancestors.contains(&real) {
                        let mut chain = ancestors.clone();
                        chain.push(real);
                        stack.push((path, chain));
                    }
                } else if metadata.is_file() {
                    found.push((path, target));
                }
            }
        }
        found.sort();
        for (path, target) in found {
            let name = path
                .strip_prefix(&dir)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let text = match read_limited(&target) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => text,
                    Err(_) => continue, // binary files (images beside templates) are not templates
                },
                Err(err) => {
                    self.error("template-file", Location::file_start(&path), format!("cannot read template: {err}"));
                    continue;
                }
            };
            self.inputs.record(&path, text.as_bytes());
            let compiled = self.env.template_from_named_str(&name, &text).map(drop);
            if let Err(err) = compiled {
                self.broken.insert(name.clone());
                let location = match err.range() {
                    Some(range) => text_location(&path, &text, range),
                    None => Location { file: path.clone(), line: err.line().unwrap_or(1), column: 1, width: 1 },
                };
                self.diagnostics.push(Diagnostic::error(
                    "template-syntax",
                    location,
                    format!("template `{name}`: {}", syntax_message(&err)),
                ));
            }
            self.sources.insert(name.clone(), text);
            self.template_files.insert(name, None);
        }
    }

    /// Registers an inline template and checks it. Returns its name.
    pub(super) fn inline(
        &mut self,
        name: String,
        source: &str,
        origin: &Origin,
        below: &str,
        scope: &mut Scope,
    ) -> Option<String> {
        let location = self.assembled.locate(origin, below);
        if let Err(err) = self.env.template_from_named_str(&name, source) {
            let message = syntax_message(&err);
            let placed = err.range().and_then(|range| self.in_scalar(&location, source, range));
            match placed {
                Some(placed) => self.error("template-syntax", placed, message),
                None => {
                    let where_ = match err.line() {
                        Some(line) if source.lines().count() > 1 => format!(" (line {line} of the template)"),
                        _ => String::new(),
                    };
                    self.error("template-syntax", location, format!("{message}{where_}"))
                }
            };
            return None;
        }
        self.sources.insert(name.clone(), source.to_owned());
        self.check_template(&name, &Written::Inline(location), scope, true);
        Some(name)
    }

    /// Checks a `template:` file reference. Returns its name.
    pub(super) fn file_template(
        &mut self,
        name: &str,
        origin: &Origin,
        below: &str,
        scope: &mut Scope,
    ) -> Option<String> {
        let location = self.assembled.locate(origin, below);
        if !self.template_files.contains_key(name) {
            let known: Vec<String> = self.template_files.keys().cloned().collect();
            let dir = match &self.templates_dir {
                Some(dir) => dir.display().to_string(),
                None => format!("{} (which does not exist)", self.configured_templates_dir().display()),
            };
            let hint = suggest(name, known.iter().map(String::as_str))
                .unwrap_or_else(|| format!("template files are looked up in `{dir}`"));
            self.error("unknown-template", location, format!("template file `{name}` not found")).hint = Some(hint);
            return None;
        }
        if self.broken.contains(name) {
            // A syntax error in the file, reported where the file is.
            return None;
        }
        let mut first_use = false;
        self.template_files.entry(name.to_owned()).and_modify(|first| {
            if first.is_none() {
                *first = Some(location.clone());
                first_use = true;
            }
        });
        let path = self.templates_dir.clone().unwrap_or_default().join(name);
        let written = Written::File { path, used_at: location, owner: self.owner_of(origin) };
        self.check_template(name, &written, scope, first_use);
        Some(name.to_owned())
    }

    /// Checks what template `name` uses: variables against `scope` (each
    /// use), and, when `everything`, filters, tests and `data` paths (which
    /// do not depend on who uses it: once per file).
    fn check_template(&mut self, name: &str, written: &Written, scope: &mut Scope, everything: bool) {
        let Some(source) = self.sources.get(name).cloned() else { return };
        // A template that does not parse was reported where it is.
        let Ok(analysis) = template_analysis::analyze(&source, &self.assembled.data) else { return };
        for variable in analysis.undeclared {
            if self.globals.contains(&variable.name) {
                continue;
            }
            if scope.allowed.contains(&variable.name) {
                scope.used.insert(variable.name);
                continue;
            }
            let hint = suggest(&variable.name, scope.allowed.iter().map(String::as_str))
                .unwrap_or_else(|| format!("this template can use: {}", scope.allowed.join(", ")));
            let message = format!("template uses `{}`, which is not defined here", variable.name);
            self.report_in(written, &source, variable.range, "unknown-variable", message, hint);
        }
        if !everything {
            return;
        }
        for (kind, uses) in [("filter", analysis.filters), ("test", analysis.tests)] {
            for used in uses {
                let known =
                    if kind == "filter" { render::has_filter(&used.name) } else { render::has_test(&used.name) };
                if known {
                    continue;
                }
                let names = if kind == "filter" { render::filter_names() } else { render::test_names() };
                let hint = suggest(&used.name, names.iter().copied())
                    .unwrap_or_else(|| format!("the {kind}s are: {}", names.join(", ")));
                let code = if kind == "filter" { "unknown-filter" } else { "unknown-test" };
                self.report_in(written, &source, used.range, code, format!("unknown {kind} `{}`", used.name), hint);
            }
        }
        for problem in analysis.data {
            self.report_in(written, &source, problem.range, "unknown-data", problem.message, problem.hint);
        }
        for problem in analysis.jq {
            self.report_in(written, &source, problem.range, "invalid-jq", problem.message, problem.hint);
        }
    }

    /// Reports an error at `range` of a template's `source`.
    fn report_in(
        &mut self,
        written: &Written,
        source: &str,
        range: Range<usize>,
        code: &'static str,
        message: String,
        hint: String,
    ) {
        let mut diagnostic = match written {
            Written::Inline(at) => {
                let location = self.in_scalar(at, source, range).unwrap_or_else(|| at.clone());
                Diagnostic::error(code, location, message)
            }
            Written::File { path, used_at, owner } => {
                Diagnostic::error(code, text_location(path, source, range), message)
                    .with_note(format!("used by {owner} here"), used_at.clone())
            }
        };
        diagnostic.hint = Some(hint);
        self.diagnostics.push(diagnostic);
    }

    /// Where `range` of an inline template written as the scalar at `at` is.
    fn in_scalar(&mut self, at: &Location, source: &str, range: Range<usize>) -> Option<Location> {
        let text = self
            .file_texts
            .entry(at.file.clone())
            .or_insert_with(|| std::fs::read_to_string(&at.file).ok())
            .as_deref()?;
        scalar_map::locate_in_scalar(text, at, source, range)
    }

    /// "tool `x`", "prompt `y`", … for the declaration at `origin`.
    fn owner_of(&self, origin: &Origin) -> String {
        let assembled = self.assembled;
        let same = |other: &Origin| other.file == origin.file && other.pointer == origin.pointer;
        if let Some(tool) = assembled.tools.iter().find(|d| same(&d.origin)) {
            return format!("tool `{}`", tool.spec.name);
        }
        if let Some(prompt) = assembled.prompts.iter().find(|d| same(&d.origin)) {
            return format!("prompt `{}`", prompt.spec.name);
        }
        if let Some(resource) = assembled.resources.iter().find(|d| same(&d.origin)) {
            return format!("resource `{}`", resource.spec.uri);
        }
        if let Some(template) = assembled.resource_templates.iter().find(|d| same(&d.origin)) {
            return format!("resource template `{}`", template.spec.name);
        }
        "the catalog".to_owned()
    }

    /// Registers the text/template of a content block; returns the block.
    pub(super) fn block(
        &mut self,
        spec: &ContentSpec,
        owner: &str,
        origin: &Origin,
        below: &str,
        scope: &mut Scope,
    ) -> Option<Block> {
        let kinds = present([
            ("text", spec.text.is_some()),
            ("template", spec.template.is_some()),
            ("image", spec.image.is_some()),
            ("audio", spec.audio.is_some()),
            ("resource", spec.resource.is_some()),
            ("resource_link", spec.resource_link.is_some()),
        ]);
        if kinds.len() != 1 {
            let location = self.assembled.locate(origin, below);
            let message = if kinds.is_empty() {
                "this block has no content".to_owned()
            } else {
                format!(
                    "this block has {} at once",
                    kinds.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" and ")
                )
            };
            self.error("content-block", location, message).hint =
                Some("give each block exactly one of text, template, image, audio, resource, resource_link".to_owned());
            return None;
        }
        if let Some(text) = &spec.text {
            return self
                .inline(format!("{owner}{below}/text"), text, origin, &format!("{below}/text"), scope)
                .map(Block::Text);
        }
        if let Some(template) = &spec.template {
            return self.file_template(template, origin, &format!("{below}/template"), scope).map(Block::Text);
        }
        if let Some(media) = &spec.image {
            return self.media(MediaKind::Image, media, origin, &format!("{below}/image"));
        }
        if let Some(media) = &spec.audio {
            return self.media(MediaKind::Audio, media, origin, &format!("{below}/audio"));
        }
        if let Some(uri) = &spec.resource {
            return self
                .inline(format!("{owner}{below}/resource"), uri, origin, &format!("{below}/resource"), scope)
                .map(Block::Resource);
        }
        let link = spec.resource_link.as_ref()?;
        let uri = self.inline(
            format!("{owner}{below}/resource_link"),
            &link.uri,
            origin,
            &format!("{below}/resource_link/uri"),
            scope,
        )?;
        Some(Block::ResourceLink {
            uri,
            name: link.name.clone(),
            title: link.title.clone(),
            description: link.description.clone(),
            mime_type: link.mime_type.clone(),
        })
    }

    pub(super) fn media(&mut self, kind: MediaKind, spec: &MediaSpec, origin: &Origin, below: &str) -> Option<Block> {
        let location = self.assembled.locate(origin, below);
        match (&spec.file, &spec.data) {
            (Some(file), None) => {
                let path = self.assembled.base_dir(origin).join(file);
                let bytes = match read_limited(&path) {
                    Ok(bytes) => bytes,
                    Err(err) => {
                        let location = self.assembled.locate(origin, &format!("{below}/file"));
                        self.error("media-file", location, format!("cannot read `{}`: {err}", path.display())).hint =
                            Some("paths are relative to the catalog file that names them".to_owned());
                        return None;
                    }
                };
                self.inputs.record(&path, &bytes);
                let Some(mime_type) = spec.mime_type.clone().or_else(|| guess_mime(&path).map(str::to_owned)) else {
                    self.error("mime-type", location, format!("cannot tell the MIME type of `{file}`")).hint =
                        Some("add `mimeType:`, e.g. `mimeType: image/png`".to_owned());
                    return None;
                };
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                Some(Block::Media { kind, data: data.into(), mime_type })
            }
            (None, Some(data)) => {
                let compact: String = data.split_whitespace().collect();
                if base64::engine::general_purpose::STANDARD.decode(&compact).is_err() {
                    let location = self.assembled.locate(origin, &format!("{below}/data"));
                    self.error("media-data", location, "`data` is not valid base64");
                    return None;
                }
                let Some(mime_type) = spec.mime_type.clone() else {
                    self.error("mime-type", location, "base64 `data` needs a `mimeType`");
                    return None;
                };
                Some(Block::Media { kind, data: compact.into(), mime_type })
            }
            _ => {
                self.error("media", location, "give exactly one of `file` or `data`");
                None
            }
        }
    }
}

/// Where a template's text is written, to place what is found inside it.
enum Written {
    /// A string of the catalog: the scalar at this place.
    Inline(Location),
    /// A file of the templates folder, used at `used_at` by `owner`.
    File { path: PathBuf, used_at: Location, owner: String },
}

/// The place of `range` (bytes of `text`, the file at `path`): its first
/// line, underlining to the range's end or that line's.
fn text_location(path: &Path, text: &str, range: Range<usize>) -> Location {
    let start = floor_boundary(text, range.start);
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |idx| idx + 1);
    let column = text[line_start..start].chars().count() + 1;
    let end = floor_boundary(text, range.end.max(start));
    let token = &text[start..end];
    let width = token.split('\n').next().map_or(0, |first| first.chars().count()).max(1);
    Location { file: path.to_path_buf(), line, column, width }
}

/// The largest character boundary of `text` at or before `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// minijinja's message for a template that does not compile, without the
/// template's internal name and line (the location says where).
fn syntax_message(err: &minijinja::Error) -> String {
    let message = render::describe(err);
    match message.find(" (in template") {
        Some(idx) => message[..idx].to_owned(),
        None => message,
    }
}
