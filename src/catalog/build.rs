//! Semantic checks, and building the runtime [`Catalog`] from the merged
//! declarations: names and duplicates, JSON Schemas, templates (syntax and
//! variables), resources and URI templates, databases and SQL statements.
//! Every check reports into one list so that a person sees all problems of a
//! catalog in one run.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use super::assemble::{Assembled, Declared, Origin, io_reason};
use super::model::{
    ContentSpec, DurationSpec, MediaSpec, NumberSpec, PromptSpec, ResourceSpec, ResourceTemplateSpec, RunSpec,
    SleepSpec, StepSpec, ToolSpec,
};
use super::{
    Amount, Block, Body, Catalog, DatabaseEntry, Effect, Inputs, MediaKind, Prompt, PromptArgument, Resource,
    ResourceTemplate, ResultSpec, Schema, ServerInfo, Step, StepData, Tool, Wait,
};
use crate::diag::{Diagnostic, Location, did_you_mean};
use crate::render;
use crate::run::sql::{self, Database, Probe, parse_url};
use crate::uri_template::UriTemplate;

/// Longest tool or prompt name MCP allows.
const MAX_NAME: usize = 128;
/// Names longer than this get cut by some clients.
const LONG_NAME: usize = 64;
/// Largest file carte reads into a catalog (resources, media, templates).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

struct Builder<'a> {
    assembled: &'a Assembled,
    diagnostics: &'a mut Vec<Diagnostic>,
    /// Compiles templates to check them; the catalog's own environment is
    /// built at the end from `sources`.
    env: minijinja::Environment<'static>,
    /// Every template's source by name (inline ones and the templates folder's).
    sources: HashMap<String, String>,
    /// Templates that did not compile (already reported).
    broken: HashSet<String>,
    globals: HashSet<String>,
    templates_dir: Option<PathBuf>,
    /// Template files, with the first catalog place that uses each.
    template_files: HashMap<String, Option<Location>>,
    inputs: &'a mut Inputs,
    previous: Option<&'a Catalog>,
    databases: IndexMap<String, DatabaseEntry>,
    /// A scratch copy of each database, with the new `setup` run on it, on
    /// which statements are prepared; dropped, uncommitted, after the build.
    probes: HashMap<String, Probe>,
}

/// Builds the catalog, or returns `None` after reporting why it cannot be.
/// Every file it reads is added to `inputs`, even when it fails; databases
/// of `previous` are reused where the new catalog declares the same ones.
pub fn build(
    assembled: Assembled,
    diagnostics: &mut Vec<Diagnostic>,
    inputs: &mut Inputs,
    previous: Option<&Catalog>,
) -> Option<Catalog> {
    let env = render::environment();
    let globals = render::global_names(&env);
    let mut builder = Builder {
        assembled: &assembled,
        diagnostics,
        env,
        sources: HashMap::new(),
        broken: HashSet::new(),
        globals,
        templates_dir: None,
        template_files: HashMap::new(),
        inputs,
        previous,
        databases: IndexMap::new(),
        probes: HashMap::new(),
    };
    let server = builder.server_info();
    builder.load_template_files();
    builder.open_databases();
    let tools: Vec<Tool> = assembled.tools.iter().filter_map(|decl| builder.tool(decl)).collect();
    let prompts: Vec<Prompt> = assembled.prompts.iter().filter_map(|decl| builder.prompt(decl)).collect();
    let resources: Vec<Resource> = assembled.resources.iter().filter_map(|decl| builder.resource(decl)).collect();
    let resource_templates: Vec<ResourceTemplate> =
        assembled.resource_templates.iter().filter_map(|decl| builder.resource_template(decl)).collect();
    builder.check_duplicates();
    builder.check_prompt_resources(&resources, &resource_templates);
    let data = crate::render::to_value(&assembled.data);
    builder.inputs.templates = vec![builder.configured_templates_dir()];
    let inputs = builder.inputs.clone();
    let Builder { sources, databases, .. } = builder;
    let env = render::catalog_environment(sources);
    let tool_index = tools.iter().enumerate().map(|(idx, t)| (t.name.clone(), idx)).collect();
    let prompt_index = prompts.iter().enumerate().map(|(idx, p)| (p.name.clone(), idx)).collect();
    let resource_index = resources.iter().enumerate().map(|(idx, r)| (r.uri.clone(), idx)).collect();
    Some(Catalog {
        server,
        tools,
        prompts,
        resources,
        resource_templates,
        env,
        data,
        databases,
        inputs,
        tool_index,
        prompt_index,
        resource_index,
    })
}

/// What a template may refer to, and which of those it did use.
struct Scope {
    allowed: Vec<String>,
    used: HashSet<String>,
}

impl Scope {
    fn new(names: impl IntoIterator<Item = String>) -> Scope {
        Scope { allowed: names.into_iter().collect(), used: HashSet::new() }
    }
}

impl Builder<'_> {
    fn error(&mut self, code: &'static str, location: Location, message: impl Into<String>) -> &mut Diagnostic {
        let idx = self.diagnostics.len();
        self.diagnostics.push(Diagnostic::error(code, location, message));
        &mut self.diagnostics[idx]
    }

    fn warn(&mut self, code: &'static str, location: Location, message: impl Into<String>) -> &mut Diagnostic {
        let idx = self.diagnostics.len();
        self.diagnostics.push(Diagnostic::warning(code, location, message));
        &mut self.diagnostics[idx]
    }

    fn server_info(&mut self) -> ServerInfo {
        let root = &self.assembled.files[0].file;
        match &self.assembled.server {
            Some(Declared { spec, .. }) => ServerInfo {
                name: spec.name.clone(),
                version: spec.version.clone().unwrap_or_else(|| "0.0.0".to_owned()),
                title: spec.title.clone(),
                description: spec.description.clone(),
                website_url: spec.website_url.clone(),
                instructions: spec.instructions.clone(),
            },
            None => ServerInfo {
                name: root.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "carte".to_owned()),
                version: "0.0.0".to_owned(),
                title: None,
                description: None,
                website_url: None,
                instructions: None,
            },
        }
    }

    /// The templates folder the catalog asks for, whether it exists or not.
    fn configured_templates_dir(&self) -> PathBuf {
        match self.assembled.server.as_ref().and_then(|s| s.spec.templates.as_ref().map(|t| (s, t))) {
            Some((server, templates)) => self.assembled.base_dir(&server.origin).join(templates),
            None => self.assembled.files[0].file.parent().map(Path::to_path_buf).unwrap_or_default().join("templates"),
        }
    }

    /// Reads every file of the templates folder into the environment.
    fn load_template_files(&mut self) {
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

    /// Checks each database without changing it: its `setup` runs on a
    /// scratch copy of its schema (see [`Probe`]), where the tools'
    /// statements are prepared later. Nothing is opened for real here.
    fn open_databases(&mut self) {
        for (name, decl) in &self.assembled.databases {
            let base = self.assembled.base_dir(&decl.origin);
            let url_location = self.assembled.locate(&decl.origin, "/url");
            let timeout = match decl.spec.timeout.as_ref().map(parse_timeout) {
                None => sql::DEFAULT_TIMEOUT,
                Some(Ok(timeout)) => timeout,
                Some(Err(message)) => {
                    let location = self.assembled.locate(&decl.origin, "/timeout");
                    self.error("database-timeout", location, format!("database `{name}`: {message}")).hint = Some(
                        "write how long one statement may run, such as `500ms`, `5s` or `1m` (at most `1h`)".to_owned(),
                    );
                    continue;
                }
            };
            let path = match parse_url(&decl.spec.url, &base) {
                Ok(path) => path,
                Err(message) => {
                    self.error("database-url", url_location, format!("database `{name}`: {message}"));
                    continue;
                }
            };
            let setup: Vec<String> =
                decl.spec.setup.as_ref().map(|s| s.list()).unwrap_or_default().into_iter().map(str::to_owned).collect();
            // A reload keeps the database it replaces (open, with its rows) if
            // the URL is the same: a file by its path, preferably under the same
            // name; an in-memory database by its name.
            let taken = |db: &Arc<Database>| self.databases.values().any(|e| Arc::ptr_eq(&e.database, db));
            let reused = self.previous.and_then(|previous| {
                let candidates =
                    || previous.databases.iter().filter(|(_, e)| e.database.path == path && !taken(&e.database));
                candidates()
                    .find(|(old_name, _)| *old_name == name)
                    .or_else(|| path.is_some().then(|| candidates().next()).flatten())
                    .map(|(_, e)| e.database.clone())
            });
            let database = match reused {
                Some(database) => database,
                None => match Database::new(path) {
                    Ok(database) => Arc::new(database),
                    Err(message) => {
                        self.error("database-open", url_location, format!("cannot open database `{name}`: {message}"));
                        continue;
                    }
                },
            };
            let mut probe = match database.probe(timeout) {
                Ok(probe) => probe,
                Err(message) => {
                    self.error("database-open", url_location, format!("cannot open database `{name}`: {message}"));
                    continue;
                }
            };
            let many = matches!(decl.spec.setup, Some(super::model::Statements::Many(_)));
            let setup_locations: Vec<Location> = (0..setup.len())
                .map(|idx| {
                    let pointer = if many { format!("/setup/{idx}") } else { "/setup".to_owned() };
                    self.assembled.locate(&decl.origin, &pointer)
                })
                .collect();
            // What applying will do: run `setup` unless it is what was applied last.
            if database.applied().as_ref() != Some(&setup) {
                let failed = setup.iter().zip(&setup_locations).find_map(|(statement, location)| {
                    probe.run_setup(statement).err().map(|message| (message, location.clone()))
                });
                if let Some((message, location)) = failed {
                    self.error("database-setup", location, format!("setup of database `{name}` failed: {message}"))
                        .hint = Some("setup statements run at every start and at each reload that changes them, so they must be idempotent (CREATE TABLE IF NOT EXISTS …)".to_owned());
                    continue;
                }
            }
            self.probes.insert(name.clone(), probe);
            self.databases
                .insert(name.clone(), DatabaseEntry { database, setup, setup_locations, url_location, timeout });
        }
    }

    /// Checks a tool or prompt name against MCP's rule.
    fn check_name(&mut self, kind: &str, name: &str, origin: &Origin) {
        let location = self.assembled.locate(origin, "/name");
        let bad: Vec<char> =
            name.chars().filter(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))).collect();
        if name.is_empty() {
            self.error("name", location, format!("{kind} name is empty")).hint =
                Some("give it a short name of letters, digits, `_`, `.` or `-`, e.g. `get_quote`".to_owned());
        } else if !bad.is_empty() {
            let suggestion: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
                .collect();
            self.error("name", location, format!("{kind} name `{name}` contains {}", describe_chars(&bad))).hint =
                Some(format!("MCP names use only letters, digits, `_`, `.` and `-`; try `{suggestion}`"));
        } else if name.len() > MAX_NAME {
            self.error(
                "name",
                location,
                format!("{kind} name is {} characters long; MCP allows at most {MAX_NAME}", name.len()),
            );
        } else if name.len() > LONG_NAME {
            self.warn("long-name", location, format!("{kind} name is {} characters long", name.len())).hint =
                Some(format!("some clients cut names at {LONG_NAME} characters"));
        }
    }

    fn check_description(&mut self, kind: &str, name: &str, description: Option<&String>, origin: &Origin) {
        if description.is_none_or(|d| d.trim().is_empty()) {
            let location = self.assembled.locate(origin, "/description");
            self.warn("empty-description", location, format!("{kind} `{name}` has no description")).hint = Some(
                "models choose tools and prompts by their description; say what it does and when to use it".to_owned(),
            );
        }
    }

    /// Validates a JSON Schema and compiles it.
    fn schema(&mut self, schema: &Map<String, Value>, origin: &Origin, key: &str) -> Option<Schema> {
        let location = self.assembled.locate(origin, &format!("/{key}"));
        let value = Value::Object(schema.clone());
        let meta = match jsonschema::meta::validator_for(&value) {
            Ok(meta) => meta,
            Err(err) => {
                let location = self.assembled.locate(origin, &format!("/{key}/$schema"));
                self.error(
                    "schema-invalid",
                    location,
                    format!("`{key}` names a meta-schema carte does not know: {err}"),
                )
                .hint = Some("leave out `$schema` (2020-12 is the default) or use a standard draft's URL".to_owned());
                return None;
            }
        };
        let mut reported: Vec<String> = Vec::new();
        let errors = if meta.is_valid(&value) { Vec::new() } else { meta.iter_errors(&value).collect() };
        for err in errors {
            let path = err.instance_path().as_str().to_owned();
            if reported.iter().any(|seen| path.starts_with(seen.as_str())) {
                continue; // one message per place is enough
            }
            let location = self.assembled.locate(origin, &format!("/{key}{path}"));
            let (message, hint) = explain_schema_error(key, &path, &err);
            self.error("schema-invalid", location, message).hint = Some(hint);
            reported.push(path);
        }
        if !reported.is_empty() {
            return None;
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            let what = if key == "inputSchema" { "arguments" } else { "structured results" };
            self.error("schema-type", location, format!("`{key}` must have `type: object` at the top")).hint =
                Some(format!("MCP passes {what} as an object: write `type: object` with `properties:`"));
            return None;
        }
        // Compiled here to catch what the meta-schema cannot (a bad `$ref`,
        // a bad regex), then again on first use: see `Schema`.
        match jsonschema::validator_for(&value) {
            Ok(_) => Some(Schema::default()),
            Err(err) => {
                self.error("schema-invalid", location, format!("`{key}` cannot be compiled: {err}"));
                None
            }
        }
    }

    /// Registers an inline template and checks it. Returns its name.
    fn inline(
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
    fn file_template(&mut self, name: &str, origin: &Origin, below: &str, scope: &mut Scope) -> Option<String> {
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

    fn check_variables(&mut self, name: &str, location: &Location, scope: &mut Scope) {
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
    fn block(
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

    fn media(&mut self, kind: MediaKind, spec: &MediaSpec, origin: &Origin, below: &str) -> Option<Block> {
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

    fn tool(&mut self, decl: &Declared<ToolSpec>) -> Option<Tool> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("tool", &spec.name, origin);
        self.check_description("tool", &spec.name, spec.description.as_ref(), origin);
        let input_schema = spec.input_schema.clone().unwrap_or_else(|| {
            let mut empty = Map::new();
            empty.insert("type".to_owned(), json!("object"));
            empty.insert("properties".to_owned(), json!({}));
            empty
        });
        let input = self.schema(&input_schema, origin, "inputSchema");
        let output = spec.output_schema.as_ref().map(|schema| self.schema(schema, origin, "outputSchema"));
        let properties: Vec<String> = input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let run = &spec.run;
        let errors_before = self.diagnostics.iter().filter(|d| d.is_error()).count();
        let effect = self.effect(run, &properties, origin);
        let mut names = properties.clone();
        names.extend(["data".to_owned(), "arguments".to_owned()]);
        if run.sql.is_some() {
            names.extend(["rows".to_owned(), "truncated".to_owned()]);
        }
        let declared_steps = run.steps.as_deref().unwrap_or_default();
        if declared_steps.iter().any(|step| step.elicit.is_some()) {
            names.push("elicited".to_owned());
        }
        if declared_steps.iter().any(|step| step.sample.is_some()) {
            names.push("sampled".to_owned());
        }
        let mut scope = Scope::new(names);
        let owner = format!("tool {}:", spec.name);
        let steps = self.steps(declared_steps, &owner, origin, &mut scope);
        let result = self.result(run, &owner, origin, &mut scope);
        if effect.is_some()
            && let Some(sql) = &run.sql
            && let Some(probe) = self.probes.get(&sql.database)
            && let Ok(params) = probe.check(&sql.statement)
        {
            scope.used.extend(params);
        }
        // Where a template or statement could not be checked, "unused" would be a guess.
        let checked = self.diagnostics.iter().filter(|d| d.is_error()).count() == errors_before;
        if checked && !scope.used.contains("arguments") {
            for property in &properties {
                if !scope.used.contains(property) {
                    let location = self.assembled.locate_key(origin, &format!("/inputSchema/properties/{property}"));
                    self.warn(
                        "unused-argument",
                        location,
                        format!("argument `{property}` is never used by tool `{}`", spec.name),
                    )
                    .hint = Some("use it in the result template or the SQL statement, or remove it".to_owned());
                }
            }
        }
        let structured = run.json == Some(true) || spec.output_schema.is_some();
        let mut wire = Map::new();
        wire.insert("name".to_owned(), json!(spec.name));
        if let Some(title) = &spec.title {
            wire.insert("title".to_owned(), json!(title));
        }
        if let Some(description) = &spec.description {
            wire.insert("description".to_owned(), json!(description));
        }
        wire.insert("inputSchema".to_owned(), Value::Object(input_schema));
        if let Some(schema) = &spec.output_schema {
            wire.insert("outputSchema".to_owned(), Value::Object(schema.clone()));
        }
        if let Some(annotations) = &spec.annotations {
            let mut map = Map::new();
            let pairs = [
                ("title", annotations.title.as_ref().map(|t| json!(t))),
                ("readOnlyHint", annotations.read_only_hint.map(Value::Bool)),
                ("destructiveHint", annotations.destructive_hint.map(Value::Bool)),
                ("idempotentHint", annotations.idempotent_hint.map(Value::Bool)),
                ("openWorldHint", annotations.open_world_hint.map(Value::Bool)),
            ];
            for (key, value) in pairs {
                if let Some(value) = value {
                    map.insert(key.to_owned(), value);
                }
            }
            wire.insert("annotations".to_owned(), Value::Object(map));
        }
        let input = input?;
        let output = match output {
            Some(compiled) => Some(compiled?),
            None => None,
        };
        let result = result?;
        let steps = steps?;
        if run.sql.is_some() && effect.is_none() {
            return None;
        }
        Some(Tool { name: spec.name.clone(), wire, input, output, structured, steps, effect, result })
    }

    fn effect(&mut self, run: &RunSpec, properties: &[String], origin: &Origin) -> Option<Effect> {
        let sql = run.sql.as_ref()?;
        let location = self.assembled.locate(origin, "/run/sql/database");
        let (Some(entry), Some(probe)) = (self.databases.get(&sql.database), self.probes.get(&sql.database)) else {
            if self.assembled.databases.contains_key(&sql.database) {
                return None; // it failed to open; that error is reported already
            }
            let known: Vec<&str> = self.assembled.databases.keys().map(String::as_str).collect();
            let hint = match did_you_mean(&sql.database, known.iter().copied()) {
                Some(close) => format!("did you mean `{close}`?"),
                None if known.is_empty() => "declare it under `databases:` with a `url:`".to_owned(),
                None => format!("declared databases: {}", known.join(", ")),
            };
            self.error("unknown-database", location, format!("database `{}` is not declared", sql.database)).hint =
                Some(hint);
            return None;
        };
        let location = self.assembled.locate(origin, "/run/sql/statement");
        let (database, timeout) = (entry.database.clone(), entry.timeout);
        match probe.check(&sql.statement) {
            Ok(params) => {
                let mut ok = true;
                for param in params {
                    if !properties.contains(&param) {
                        let hint = match did_you_mean(&param, properties.iter().map(String::as_str)) {
                            Some(close) => format!("did you mean `:{close}`?"),
                            None => format!("add `{param}` to `inputSchema.properties`"),
                        };
                        self.error(
                            "sql-parameter",
                            location.clone(),
                            format!("statement uses `:{param}`, which is not an argument of this tool"),
                        )
                        .hint = Some(hint);
                        ok = false;
                    }
                }
                ok.then(|| Effect::Sql { database, statement: sql.statement.clone(), timeout })
            }
            Err(message) => {
                let hint = if message.contains("positional") {
                    "name each parameter after a property of `inputSchema`, e.g. `WHERE id = :id`"
                } else {
                    "it is checked against the database after `setup` ran; check table and column names"
                };
                self.error(
                    "sql",
                    location,
                    format!("statement does not prepare against database `{}`: {message}", sql.database),
                )
                .hint = Some(hint.to_owned());
                None
            }
        }
    }

    /// Checks `run.steps` and registers their templates.
    fn steps(&mut self, specs: &[StepSpec], owner: &str, origin: &Origin, scope: &mut Scope) -> Option<Vec<Step>> {
        let mut steps = Vec::new();
        let mut ok = true;
        for (idx, spec) in specs.iter().enumerate() {
            let below = format!("/run/steps/{idx}");
            let kinds = present([
                ("log", spec.log.is_some()),
                ("progress", spec.progress.is_some()),
                ("sleep", spec.sleep.is_some()),
                ("elicit", spec.elicit.is_some()),
                ("sample", spec.sample.is_some()),
            ]);
            if kinds.len() != 1 {
                let location = self.assembled.locate(origin, &below);
                let message = if kinds.is_empty() {
                    "this step does nothing".to_owned()
                } else {
                    format!("a step does one thing, but this one has `{}`", kinds.join("` and `"))
                };
                self.error("step", location, message).hint = Some(
                    "write each as its own list item: `- log: …`, `- progress: …`, `- sleep: 50ms`, `- elicit: …`, `- sample: …`"
                        .to_owned(),
                );
                ok = false;
                continue;
            }
            let name = |key: &str| format!("{owner}/run/steps/{idx}/{key}");
            let step = if let Some(log) = &spec.log {
                let data = match &log.data {
                    Value::String(text) => self
                        .inline(name("log/data"), text, origin, &format!("{below}/log/data"), scope)
                        .map(StepData::Template),
                    other => Some(StepData::Literal(other.clone())),
                };
                data.map(|data| Step::Log { level: log.level, logger: log.logger.clone(), data })
            } else if let Some(progress) = &spec.progress {
                let amount = |builder: &mut Self, value: &NumberSpec, key: &str, scope: &mut Scope| match value {
                    NumberSpec::Number(n) => Some(Amount::Number(*n)),
                    NumberSpec::Template(text) => builder
                        .inline(
                            name(&format!("progress/{key}")),
                            text,
                            origin,
                            &format!("{below}/progress/{key}"),
                            scope,
                        )
                        .map(Amount::Template),
                };
                let value = amount(self, &progress.progress, "progress", scope);
                let total = match &progress.total {
                    Some(total) => amount(self, total, "total", scope).map(Some),
                    None => Some(None),
                };
                let message = match &progress.message {
                    Some(text) => self
                        .inline(name("progress/message"), text, origin, &format!("{below}/progress/message"), scope)
                        .map(Some),
                    None => Some(None),
                };
                match (value, total, message) {
                    (Some(progress), Some(total), Some(message)) => Some(Step::Progress { progress, total, message }),
                    _ => None,
                }
            } else if let Some(SleepSpec::Text(text)) = &spec.sleep
                && ["{{", "{%", "{#"].iter().any(|open| text.contains(open))
            {
                // A template: its output is read as a duration on each call.
                let template = self.inline(name("sleep"), text, origin, &format!("{below}/sleep"), scope);
                template.map(|template| Step::Sleep(Wait::Template(template)))
            } else if let Some(sleep) = &spec.sleep {
                match parse_duration(sleep) {
                    Ok(duration) => Some(Step::Sleep(Wait::Fixed(duration))),
                    Err(message) => {
                        let location = self.assembled.locate(origin, &format!("{below}/sleep"));
                        self.error("step", location, message).hint =
                            Some("write a duration such as `50ms`, `2s` or `1m` (at most 10m)".to_owned());
                        None
                    }
                }
            } else if let Some(elicit) = &spec.elicit {
                let message = self.inline(
                    name("elicit/message"),
                    &elicit.message,
                    origin,
                    &format!("{below}/elicit/message"),
                    scope,
                );
                if elicit.requested_schema.get("type").and_then(Value::as_str) != Some("object") {
                    let location = self.assembled.locate(origin, &format!("{below}/elicit/requestedSchema"));
                    self.error("step", location, "`requestedSchema` must have `type: object` at the top").hint = Some(
                        "an elicitation form is an object of primitive properties: `type: object` with `properties:`"
                            .to_owned(),
                    );
                    None
                } else {
                    message
                        .map(|message| Step::Elicit { message, schema: Value::Object(elicit.requested_schema.clone()) })
                }
            } else if let Some(sample) = &spec.sample {
                let mut messages = Vec::new();
                let mut all = true;
                for (at, message) in sample.messages.iter().enumerate() {
                    let key = format!("sample/messages/{at}/text");
                    match self.inline(name(&key), &message.text, origin, &format!("{below}/{key}"), scope) {
                        Some(template) => messages.push((message.role, template)),
                        None => all = false,
                    }
                }
                let system = match &sample.system_prompt {
                    Some(text) => self
                        .inline(
                            name("sample/systemPrompt"),
                            text,
                            origin,
                            &format!("{below}/sample/systemPrompt"),
                            scope,
                        )
                        .map(Some),
                    None => Some(None),
                };
                match system {
                    Some(system) if all => Some(Step::Sample { messages, max_tokens: sample.max_tokens, system }),
                    _ => None,
                }
            } else {
                None
            };
            match step {
                Some(step) => steps.push(step),
                None => ok = false,
            }
        }
        ok.then_some(steps)
    }

    fn result(&mut self, run: &RunSpec, owner: &str, origin: &Origin, scope: &mut Scope) -> Option<ResultSpec> {
        let renderers = present([
            ("text", run.text.is_some()),
            ("template", run.template.is_some()),
            ("content", run.content.is_some()),
        ]);
        if renderers.len() > 1 {
            let location = self.assembled.locate(origin, "/run");
            self.error("run", location, format!("`run` has both `{}` and `{}`", renderers[0], renderers[1])).hint =
                Some("a tool renders its result with one of `text`, `template` or `content`".to_owned());
            return None;
        }
        if let Some(text) = &run.text {
            return self.inline(format!("{owner}/run/text"), text, origin, "/run/text", scope).map(ResultSpec::Text);
        }
        if let Some(template) = &run.template {
            return self.file_template(template, origin, "/run/template", scope).map(ResultSpec::Text);
        }
        if let Some(blocks) = &run.content {
            let mut built = Vec::new();
            let mut ok = true;
            for (idx, block) in blocks.iter().enumerate() {
                match self.block(block, owner, origin, &format!("/run/content/{idx}"), scope) {
                    Some(block) => built.push(block),
                    None => ok = false,
                }
            }
            if blocks.is_empty() {
                let location = self.assembled.locate(origin, "/run/content");
                self.error("run", location, "`content` is empty").hint =
                    Some("list at least one block, e.g. `- text: …`".to_owned());
                return None;
            }
            return ok.then_some(ResultSpec::Content(built));
        }
        if run.sql.is_some() {
            return Some(ResultSpec::EffectJson);
        }
        let location = self.assembled.locate_key(origin, "/run");
        self.error("run", location, "`run` does nothing").hint = Some(
            "give it `text:`, `template:` or `content:` to render a result, or an effect such as `sql:`".to_owned(),
        );
        None
    }

    fn prompt(&mut self, decl: &Declared<PromptSpec>) -> Option<Prompt> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        self.check_name("prompt", &spec.name, origin);
        self.check_description("prompt", &spec.name, spec.description.as_ref(), origin);
        let mut arguments = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (idx, argument) in spec.arguments.iter().flatten().enumerate() {
            if let Some(first) = seen.insert(argument.name.as_str(), idx) {
                let location = self.assembled.locate(origin, &format!("/arguments/{idx}/name"));
                let first_location = self.assembled.locate(origin, &format!("/arguments/{first}/name"));
                self.error("duplicate-argument", location, format!("argument `{}` is declared twice", argument.name))
                    .notes
                    .push(crate::diag::Note { message: "first declared here".to_owned(), location: first_location });
            }
            arguments.push(PromptArgument {
                name: argument.name.clone(),
                required: argument.required.unwrap_or(false),
                complete: argument.complete.clone().unwrap_or_default(),
            });
        }
        let mut names: Vec<String> = arguments.iter().map(|a| a.name.clone()).collect();
        names.extend(["data".to_owned(), "arguments".to_owned()]);
        let mut scope = Scope::new(names);
        let owner = format!("prompt {}:", spec.name);
        let errors_before = self.diagnostics.iter().filter(|d| d.is_error()).count();
        let mut messages = Vec::new();
        let mut ok = true;
        if spec.messages.is_empty() {
            let location = self.assembled.locate(origin, "/messages");
            self.error("prompt-messages", location, "prompt has no messages").hint =
                Some("add at least one, e.g. `- { role: user, text: \"…\" }`".to_owned());
            ok = false;
        }
        for (idx, message) in spec.messages.iter().enumerate() {
            match self.block(&message.block(), &owner, origin, &format!("/messages/{idx}"), &mut scope) {
                Some(block) => messages.push((message.role, block)),
                None => ok = false,
            }
        }
        let checked = self.diagnostics.iter().filter(|d| d.is_error()).count() == errors_before;
        if checked && !scope.used.contains("arguments") {
            for (idx, argument) in arguments.iter().enumerate() {
                if !scope.used.contains(&argument.name) {
                    let location = self.assembled.locate(origin, &format!("/arguments/{idx}/name"));
                    self.warn(
                        "unused-argument",
                        location,
                        format!("argument `{}` is never used by prompt `{}`", argument.name, spec.name),
                    )
                    .hint = Some("use it in a message template, or remove it".to_owned());
                }
            }
        }
        let mut wire = Map::new();
        wire.insert("name".to_owned(), json!(spec.name));
        if let Some(title) = &spec.title {
            wire.insert("title".to_owned(), json!(title));
        }
        if let Some(description) = &spec.description {
            wire.insert("description".to_owned(), json!(description));
        }
        if let Some(declared) = &spec.arguments {
            let list: Vec<Value> = declared
                .iter()
                .map(|a| {
                    let mut map = Map::new();
                    map.insert("name".to_owned(), json!(a.name));
                    if let Some(title) = &a.title {
                        map.insert("title".to_owned(), json!(title));
                    }
                    if let Some(description) = &a.description {
                        map.insert("description".to_owned(), json!(description));
                    }
                    map.insert("required".to_owned(), json!(a.required.unwrap_or(false)));
                    Value::Object(map)
                })
                .collect();
            wire.insert("arguments".to_owned(), Value::Array(list));
        }
        ok.then(|| Prompt { name: spec.name.clone(), wire, arguments, messages })
    }

    fn resource(&mut self, decl: &Declared<ResourceSpec>) -> Option<Resource> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        if let Err(reason) = check_uri(&spec.uri) {
            let location = self.assembled.locate(origin, "/uri");
            let hint = if reason.contains("scheme") {
                "a URI starts with a scheme, e.g. `myapp://policy` or `file:///path`"
            } else {
                "URIs cannot hold spaces or quotes; percent-encode them (a space is %20)"
            };
            self.error("resource-uri", location, format!("`{}` is not a valid URI: {reason}", spec.uri)).hint =
                Some(hint.to_owned());
        }
        let sources = present([
            ("text", spec.text.is_some()),
            ("template", spec.template.is_some()),
            ("file", spec.file.is_some()),
        ]);
        if sources.len() != 1 {
            let location = self.assembled.locate_key(origin, "");
            let message = if sources.is_empty() {
                format!("resource `{}` has no body", spec.uri)
            } else {
                format!("resource `{}` has both `{}` and `{}`", spec.uri, sources[0], sources[1])
            };
            self.error("resource-body", location, message).hint =
                Some("give exactly one of `text`, `template` or `file`".to_owned());
            return None;
        }
        let mut scope = Scope::new(["data".to_owned(), "uri".to_owned()]);
        let owner = format!("resource {}:", spec.uri);
        let mut mime_type = spec.mime_type.clone();
        let body = if let Some(text) = &spec.text {
            Body::Template(self.inline(format!("{owner}/text"), text, origin, "/text", &mut scope)?)
        } else if let Some(template) = &spec.template {
            Body::Template(self.file_template(template, origin, "/template", &mut scope)?)
        } else {
            let file = spec.file.as_ref()?;
            let path = self.assembled.base_dir(origin).join(file);
            let bytes = match read_limited(&path) {
                Ok(bytes) => bytes,
                Err(err) => {
                    let location = self.assembled.locate(origin, "/file");
                    self.error("resource-file", location, format!("cannot read `{}`: {err}", path.display())).hint =
                        Some("paths are relative to the catalog file that names them".to_owned());
                    return None;
                }
            };
            self.inputs.record(&path, &bytes);
            if mime_type.is_none() {
                mime_type = guess_mime(&path).map(str::to_owned);
            }
            let text = match &mime_type {
                Some(mime) => is_text_mime(mime),
                None => std::str::from_utf8(&bytes).is_ok(),
            };
            if text && std::str::from_utf8(&bytes).is_err() {
                let location = self.assembled.locate(origin, "/file");
                self.error(
                    "resource-file",
                    location,
                    format!(
                        "`{file}` is not valid UTF-8 text but its MIME type is {}",
                        mime_type.as_deref().unwrap_or("text")
                    ),
                )
                .hint = Some(
                    "set `mimeType:` to a binary type (e.g. application/octet-stream) to serve it as a blob".to_owned(),
                );
                return None;
            }
            Body::Bytes { bytes: bytes.into(), text }
        };
        let mut wire = Map::new();
        wire.insert("uri".to_owned(), json!(spec.uri));
        wire.insert("name".to_owned(), json!(spec.name));
        if let Some(title) = &spec.title {
            wire.insert("title".to_owned(), json!(title));
        }
        if let Some(description) = &spec.description {
            wire.insert("description".to_owned(), json!(description));
        }
        if let Some(mime) = &mime_type {
            wire.insert("mimeType".to_owned(), json!(mime));
        }
        if let Body::Bytes { bytes, .. } = &body {
            wire.insert("size".to_owned(), json!(bytes.len()));
        }
        Some(Resource { uri: spec.uri.clone(), wire, mime_type, body })
    }

    fn resource_template(&mut self, decl: &Declared<ResourceTemplateSpec>) -> Option<ResourceTemplate> {
        let spec = &decl.spec;
        let origin = &decl.origin;
        let template = match UriTemplate::parse(&spec.uri_template) {
            Ok(template) => template,
            Err(reason) => {
                let location = self.assembled.locate(origin, "/uriTemplate");
                self.error(
                    "uri-template",
                    location,
                    format!("`{}` is not a valid RFC 6570 URI template: {reason}", spec.uri_template),
                )
                .hint = Some("variables are written `{name}`, e.g. `myapp://rooms/{room}`".to_owned());
                return None;
            }
        };
        if let Err(reason) = check_uri(&spec.uri_template) {
            let location = self.assembled.locate(origin, "/uriTemplate");
            self.error("uri-template", location, format!("`{}` is not a valid URI: {reason}", spec.uri_template));
        }
        let variables: Vec<String> = template.variables().into_iter().map(str::to_owned).collect();
        let mut names = variables.clone();
        names.extend(["data".to_owned(), "uri".to_owned()]);
        let mut scope = Scope::new(names);
        let owner = format!("resource template {}:", spec.uri_template);
        let body = match (&spec.text, &spec.template) {
            (Some(text), None) => self.inline(format!("{owner}/text"), text, origin, "/text", &mut scope),
            (None, Some(file)) => self.file_template(file, origin, "/template", &mut scope),
            _ => {
                let location = self.assembled.locate_key(origin, "");
                self.error(
                    "resource-body",
                    location,
                    format!("resource template `{}` needs exactly one of `text` or `template`", spec.uri_template),
                );
                None
            }
        };
        for variable in &variables {
            if body.is_some() && !scope.used.contains(variable) {
                let location = self.assembled.locate(origin, "/uriTemplate");
                self.warn(
                    "unused-variable",
                    location,
                    format!("URI variable `{variable}` is never used by the body template"),
                )
                .hint = Some(format!("use `{{{{ {variable} }}}}` in the body, or drop it from the URI"));
            }
        }
        let complete = spec.complete.clone().unwrap_or_default();
        for key in complete.keys() {
            if !variables.contains(key) {
                let location = self.assembled.locate_key(origin, &format!("/complete/{key}"));
                let hint = match did_you_mean(key, variables.iter().map(String::as_str)) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None => format!("the URI template's variables are: {}", variables.join(", ")),
                };
                self.error(
                    "complete-key",
                    location,
                    format!("`complete` names `{key}`, which is not a variable of `{}`", spec.uri_template),
                )
                .hint = Some(hint);
            }
        }
        let mut wire = Map::new();
        wire.insert("uriTemplate".to_owned(), json!(spec.uri_template));
        wire.insert("name".to_owned(), json!(spec.name));
        if let Some(title) = &spec.title {
            wire.insert("title".to_owned(), json!(title));
        }
        if let Some(description) = &spec.description {
            wire.insert("description".to_owned(), json!(description));
        }
        if let Some(mime) = &spec.mime_type {
            wire.insert("mimeType".to_owned(), json!(mime));
        }
        Some(ResourceTemplate { template, wire, mime_type: spec.mime_type.clone(), body: body?, complete })
    }

    fn check_duplicates(&mut self) {
        let assembled = self.assembled;
        let groups: [(&str, Vec<NamedAt<'_>>); 5] = [
            ("tool", assembled.tools.iter().map(|d| (d.spec.name.as_str(), &d.origin, "/name")).collect()),
            ("prompt", assembled.prompts.iter().map(|d| (d.spec.name.as_str(), &d.origin, "/name")).collect()),
            ("resource URI", assembled.resources.iter().map(|d| (d.spec.uri.as_str(), &d.origin, "/uri")).collect()),
            (
                "resource template",
                assembled
                    .resource_templates
                    .iter()
                    .map(|d| (d.spec.uri_template.as_str(), &d.origin, "/uriTemplate"))
                    .collect(),
            ),
            (
                "resource template name",
                assembled.resource_templates.iter().map(|d| (d.spec.name.as_str(), &d.origin, "/name")).collect(),
            ),
        ];
        for (kind, entries) in groups {
            let mut first: HashMap<&str, (&Origin, &str)> = HashMap::new();
            for (name, origin, key) in entries {
                match first.get(name) {
                    Some((previous, previous_key)) => {
                        let location = assembled.locate(origin, key);
                        let previous_location = assembled.locate(previous, previous_key);
                        self.error("duplicate", location, format!("{kind} `{name}` is declared twice"))
                            .with_note_mut("first declared here", previous_location)
                            .hint = Some(format!(
                            "each {kind} must be unique across the catalog and all its includes; rename or remove one"
                        ));
                    }
                    None => {
                        first.insert(name, (origin, key));
                    }
                }
            }
        }
    }

    /// Prompt messages and content blocks that embed a resource by a fixed
    /// URI must name one the catalog serves.
    fn check_prompt_resources(&mut self, resources: &[Resource], templates: &[ResourceTemplate]) {
        let assembled = self.assembled;
        let mut references: Vec<(&str, Location)> = Vec::new();
        for decl in &assembled.prompts {
            for (idx, message) in decl.spec.messages.iter().enumerate() {
                if let Some(uri) = &message.resource {
                    references.push((uri, assembled.locate(&decl.origin, &format!("/messages/{idx}/resource"))));
                }
            }
        }
        for decl in &assembled.tools {
            for (idx, block) in decl.spec.run.content.iter().flatten().enumerate() {
                if let Some(uri) = &block.resource {
                    references.push((uri, assembled.locate(&decl.origin, &format!("/run/content/{idx}/resource"))));
                }
            }
        }
        for (uri, location) in references {
            if uri.contains("{{") || uri.contains("{%") {
                continue; // rendered per call; checked when it runs
            }
            let known = resources.iter().any(|r| r.uri == uri)
                || templates.iter().any(|t| matches!(t.template.match_uri(uri), Ok(Some(_))));
            if !known {
                let candidates: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
                let hint = match did_you_mean(uri, candidates.iter().copied()) {
                    Some(close) => format!("did you mean `{close}`?"),
                    None => "declare it under `resources:` (or a matching `resourceTemplates:` entry)".to_owned(),
                };
                self.error("unknown-resource", location, format!("resource `{uri}` is not declared in this catalog"))
                    .hint = Some(hint);
            }
        }
    }
}

/// A name, the declaration it belongs to, and the key it is written under.
type NamedAt<'a> = (&'a str, &'a Origin, &'a str);

trait NoteMut {
    fn with_note_mut(&mut self, message: &str, location: Location) -> &mut Self;
}

impl NoteMut for Diagnostic {
    fn with_note_mut(&mut self, message: &str, location: Location) -> &mut Self {
        self.notes.push(crate::diag::Note { message: message.to_owned(), location });
        self
    }
}

/// Words for a JSON Schema that breaks its meta-schema, for the common cases.
fn explain_schema_error(key: &str, path: &str, err: &jsonschema::ValidationError<'_>) -> (String, String) {
    const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
    let keyword = path.rsplit('/').next().unwrap_or_default();
    let place = if path.is_empty() { format!("`{key}`") } else { format!("`{key}{}`", path.replace('/', ".")) };
    let found = err.instance();
    match keyword {
        "type" => {
            let written = found.as_str().map_or_else(|| found.to_string(), str::to_owned);
            let hint = match did_you_mean(&written, TYPES) {
                Some(close) => format!("did you mean `{close}`?"),
                None => format!("JSON Schema types are: {}", TYPES.join(", ")),
            };
            (format!("{place}: `{written}` is not a JSON Schema type"), hint)
        }
        "required" => {
            (format!("{place} must be a list of property names"), "write e.g. `required: [room, hours]`".to_owned())
        }
        "properties" => (
            format!("{place} must map each property name to its schema"),
            "write e.g. `properties: { room: { type: string } }`".to_owned(),
        ),
        "enum" => (format!("{place} must be a list of allowed values"), "write e.g. `enum: [basic, pro]`".to_owned()),
        _ => (
            format!("{place} is not valid JSON Schema: {err}"),
            "see https://json-schema.org/understanding-json-schema/ for the keywords (2020-12)".to_owned(),
        ),
    }
}

fn describe_chars(chars: &[char]) -> String {
    let mut unique: Vec<char> = Vec::new();
    for c in chars {
        if !unique.contains(c) {
            unique.push(*c);
        }
    }
    let shown: Vec<String> =
        unique.iter().map(|c| if *c == ' ' { "a space".to_owned() } else { format!("`{c}`") }).collect();
    shown.join(", ")
}

/// Checks that `uri` has a scheme and no characters a URI cannot hold.
fn check_uri(uri: &str) -> Result<(), String> {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Err("it has no scheme (such as `myapp:`)".to_owned());
    };
    let scheme_ok = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(format!("`{scheme}` is not a valid scheme"));
    }
    if rest.is_empty() {
        return Err("nothing follows the scheme".to_owned());
    }
    if let Some(bad) = uri.chars().find(|c| c.is_whitespace() || matches!(c, '"' | '<' | '>' | '\\' | '^' | '`' | '|'))
    {
        let shown = if bad == ' ' { "a space".to_owned() } else { format!("`{}`", bad.escape_default()) };
        return Err(format!("it contains {shown}; percent-encode it (a space is %20)"));
    }
    Ok(())
}

fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let metadata = std::fs::metadata(path).map_err(|err| io_reason(&err))?;
    if !metadata.is_file() {
        return Err("not a file".to_owned());
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(format!("file is larger than {} MiB", MAX_FILE_BYTES / 1024 / 1024));
    }
    std::fs::read(path).map_err(|err| io_reason(&err))
}

fn column_of(err: &minijinja::Error, path: &Path) -> Option<usize> {
    let range = err.range()?;
    let text = std::fs::read_to_string(path).ok()?;
    let before = text.get(..range.start)?;
    Some(before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1)
}

/// A MIME type from a file extension, for the common cases.
pub fn guess_mime(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "text" => "text/plain",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "js" => "text/javascript",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "ogg" => "audio/ogg",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// Whether content of this MIME type is served as text (else base64).
pub fn is_text_mime(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or_default().trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/json" | "application/yaml" | "application/xml" | "application/javascript" | "image/svg+xml"
        )
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
}

/// The keys of `keys` that are present, in order (for "exactly one of" checks).
fn present<'a>(keys: impl IntoIterator<Item = (&'a str, bool)>) -> Vec<&'a str> {
    keys.into_iter().filter_map(|(key, present)| present.then_some(key)).collect()
}

/// Reads a database's `timeout`: more than zero, at most an hour.
fn parse_timeout(spec: &DurationSpec) -> Result<std::time::Duration, String> {
    let millis = match spec {
        DurationSpec::Millis(ms) => *ms,
        DurationSpec::Text(text) => millis_of(text)?,
    };
    let timeout = std::time::Duration::from_millis(millis);
    if millis == 0 {
        return Err("a timeout of 0 would stop every statement".to_owned());
    }
    if timeout > sql::MAX_TIMEOUT {
        return Err(format!("a timeout of {} is longer than 1h", sql::show_duration(timeout)));
    }
    Ok(timeout)
}

/// Reads a `sleep` duration: milliseconds, or `250ms`, `2s`, `1m`.
fn parse_duration(spec: &SleepSpec) -> Result<std::time::Duration, String> {
    match spec {
        SleepSpec::Millis(ms) => crate::run::steps::sleep_of(*ms),
        SleepSpec::Text(text) => crate::run::steps::parse_sleep(text),
    }
}

/// Milliseconds of `250ms`, `2s`, `1.5m`, `1h` (no unit: milliseconds).
pub(crate) fn millis_of(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len()));
    let number: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration"))?;
    let factor = match unit.trim() {
        "ms" | "" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => return Err(format!("unknown unit `{other}` in `{text}`")),
    };
    Ok((number * factor).round() as u64)
}
