//! Templates: the templates folder, inline and file templates, their
//! syntax and the variables they use, and content blocks.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::catalog::assemble::Origin;
use crate::catalog::model::{ContentSpec, MediaSpec};
use crate::catalog::{Block, MediaKind};
use crate::diag::{Diagnostic, Location, did_you_mean};
use crate::render;

use super::resources::guess_mime;
use super::{Builder, Scope, present, read_limited};

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
            self.sources.insert(name.clone(), text);
            if let Err(err) = compiled {
                self.broken.insert(name.clone());
                let line = err.line().unwrap_or(1);
                let column = column_of(&err, &path).unwrap_or(1);
                self.diagnostics.push(Diagnostic::error(
                    "template-syntax",
                    Location { file: path.clone(), line, column, width: 1 },
                    format!(
                        "template `{name}`: {}",
                        render::describe(&err).split(" (in template").next().unwrap_or_default()
                    ),
                ));
            }
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
            let mut message = render::describe(&err);
            if let Some(idx) = message.find(" (in template") {
                message.truncate(idx);
            }
            let where_ = match err.line() {
                Some(line) if source.lines().count() > 1 => format!(" (line {line} of the template)"),
                _ => String::new(),
            };
            self.error("template-syntax", location, format!("{message}{where_}"));
            return None;
        }
        self.sources.insert(name.clone(), source.to_owned());
        self.check_variables(&name, &location, scope);
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
            let hint = match did_you_mean(name, known.iter().map(String::as_str)) {
                Some(close) => format!("did you mean `{close}`?"),
                None => format!("template files are looked up in `{dir}`"),
            };
            self.error("unknown-template", location, format!("template file `{name}` not found")).hint = Some(hint);
            return None;
        }
        if self.broken.contains(name) {
            // A syntax error in the file, reported where the file is.
            return None;
        }
        self.template_files.entry(name.to_owned()).and_modify(|first| {
            if first.is_none() {
                *first = Some(location.clone());
            }
        });
        self.check_variables(name, &location, scope);
        Some(name.to_owned())
    }

    pub(super) fn check_variables(&mut self, name: &str, location: &Location, scope: &mut Scope) {
        let Some(source) = self.sources.get(name) else { return };
        let Ok(template) = self.env.template_from_named_str(name, source) else { return };
        let mut unknown: Vec<String> =
            template.undeclared_variables(false).into_iter().filter(|v| !self.globals.contains(v)).collect();
        drop(template);
        unknown.sort();
        for variable in unknown {
            if scope.allowed.contains(&variable) {
                scope.used.insert(variable);
                continue;
            }
            let hint = match did_you_mean(&variable, scope.allowed.iter().map(String::as_str)) {
                Some(close) => format!("did you mean `{close}`?"),
                None => format!("this template can use: {}", scope.allowed.join(", ")),
            };
            self.error(
                "unknown-variable",
                location.clone(),
                format!("template uses `{variable}`, which is not defined here"),
            )
            .hint = Some(hint);
        }
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

pub(super) fn column_of(err: &minijinja::Error, path: &Path) -> Option<usize> {
    let range = err.range()?;
    let text = std::fs::read_to_string(path).ok()?;
    let before = text.get(..range.start)?;
    Some(before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1)
}
