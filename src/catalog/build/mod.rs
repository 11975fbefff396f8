//! Semantic checks, and building the runtime [`Catalog`] from the merged
//! declarations: names and duplicates, JSON Schemas, templates (syntax and
//! variables), resources and URI templates; effects (databases and SQL
//! statements) are checked by their own modules in [`crate::effect`].
//! Every check reports into one list so that a person sees all problems of a
//! catalog in one run.
//!
//! This file holds the [`Builder`] and what every kind of entry shares
//! (names, descriptions, duplicates, unused arguments, and handing each
//! effect what it is checked against); each kind has its own file:
//! `tools.rs`, `prompts.rs`, `resources.rs`, and what they use:
//! `templates.rs`, `schemas.rs`, `mcp_headers.rs` (`x-mcp-header` marks).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::assemble::{Assembled, Declared, Origin, io_reason};
use super::{Catalog, Inputs, Prompt, Resource, ResourceTemplate, ServerInfo, Tool};
use crate::diag::{Diagnostic, Location};
use crate::effect::block::{Build, Checked, Checking, Kept, Registered};
use crate::effect::{self, Blocks};
use crate::render;

mod examples;
mod mcp_headers;
mod presentation;
mod prompts;
mod resources;
mod scalar_map;
mod schemas;
mod steps;
mod template_analysis;
mod templates;
mod tools;
mod toolsets;

pub use toolsets::valid_name as valid_toolset_name;

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
    /// Catalog files' text, read again only to place errors inside templates.
    file_texts: HashMap<PathBuf, Option<String>>,
    inputs: &'a mut Inputs,
    /// The effects' checked blocks (for `databases:`, with the scratch
    /// copies statements are prepared on: dropped, uncommitted, after the
    /// build).
    blocks: Blocks<Checking>,
    /// Templates that build URL paths (rendered with the URL escape).
    url_templates: HashSet<String>,
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
        file_texts: HashMap::new(),
        inputs,
        blocks: Blocks::default(),
        url_templates: HashSet::new(),
    };
    let server = builder.server_info();
    builder.load_template_files();
    builder.blocks =
        Blocks::build(&mut CheckBlocks { assembled: &assembled, previous, diagnostics: &mut *builder.diagnostics });
    let mut read = BlockFiles(Vec::new());
    builder.blocks.each(&mut read);
    builder.inputs.files.extend(read.0);
    let tools: Vec<Tool> = assembled.tools.iter().filter_map(|decl| builder.tool(decl)).collect();
    let prompts: Vec<Prompt> = assembled.prompts.iter().filter_map(|decl| builder.prompt(decl)).collect();
    let resources: Vec<Resource> = assembled.resources.iter().filter_map(|decl| builder.resource(decl)).collect();
    let resource_templates: Vec<ResourceTemplate> =
        assembled.resource_templates.iter().filter_map(|decl| builder.resource_template(decl)).collect();
    builder.check_duplicates();
    let toolsets = builder.toolsets(&tools);
    builder.check_prompt_resources(&resources, &resource_templates);
    let examples = builder.examples(&tools, &prompts, (&resources, &resource_templates));
    let data = crate::render::data_value(&assembled.data);
    builder.inputs.trees = vec![builder.configured_templates_dir()];
    let skills = builder.skills();
    let inputs = builder.inputs.clone();
    let Builder { sources, blocks, url_templates, .. } = builder;
    let blocks = Blocks::build(&mut KeepBlocks(blocks));
    let templates = render::Templates::new(sources, url_templates);
    let tool_index = tools.iter().enumerate().map(|(idx, t)| (t.name.clone(), idx)).collect();
    let prompt_index = prompts.iter().enumerate().map(|(idx, p)| (p.name.clone(), idx)).collect();
    let resource_index = resources.iter().enumerate().map(|(idx, r)| (r.uri.clone(), idx)).collect();
    let rate_limited = server.rate_limit.is_some() || tools.iter().any(|tool| tool.rate_limit.is_some());
    Some(Catalog {
        rate_limited,
        skills,
        server,
        tools,
        prompts,
        resources,
        resource_templates,
        toolsets,
        templates,
        data,
        blocks,
        inputs,
        examples,
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

    /// How many errors were reported so far.
    fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    /// Warns about each of `arguments` (the `idx`th located by `locate`)
    /// that no template or effect of `owner` (kind, name) used: unless one
    /// reads `arguments` whole, and only if nothing of it failed since
    /// `errors_before` (where a template or statement could not be checked,
    /// "unused" would be a guess).
    fn warn_unused<'n>(
        &mut self,
        (kind, name): (&str, &str),
        arguments: impl IntoIterator<Item = &'n str>,
        scope: &Scope,
        errors_before: usize,
        locate: impl Fn(usize, &str) -> Location,
        hint: &str,
    ) {
        if self.errors() != errors_before || scope.used.contains("arguments") {
            return;
        }
        for (idx, argument) in arguments.into_iter().enumerate() {
            if !scope.used.contains(argument) {
                self.warn(
                    "unused-argument",
                    locate(idx, argument),
                    format!("argument `{argument}` is never used by {kind} `{name}`"),
                )
                .hint = Some(hint.to_owned());
            }
        }
    }

    fn server_info(&mut self) -> ServerInfo {
        let root = &self.assembled.files[0].file;
        match &self.assembled.server {
            Some(Declared { spec, origin }) => ServerInfo {
                name: spec.name.clone(),
                version: spec.version.clone().unwrap_or_else(|| "0.0.0".to_owned()),
                title: spec.title.clone(),
                description: spec.description.clone(),
                website_url: spec.website_url.clone(),
                instructions: spec.instructions.clone(),
                icons: self.icons(spec.icons.as_ref(), origin, ""),
                cache: self.cache(spec.cache.as_ref(), origin, ""),
                rate_limit: self.rate_limit(spec.rate_limit.as_ref(), origin),
                search: spec.discovery == Some(crate::catalog::model::Discovery::Search),
            },
            None => ServerInfo {
                name: root.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "carte".to_owned()),
                version: "0.0.0".to_owned(),
                title: None,
                description: None,
                website_url: None,
                instructions: None,
                icons: None,
                cache: None,
                rate_limit: None,
                search: false,
            },
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
}

/// A name, the declaration it belongs to, and the key it is written under.
type NamedAt<'a> = (&'a str, &'a Origin, &'a str);

pub(super) trait NoteMut {
    fn with_note_mut(&mut self, message: &str, location: Location) -> &mut Self;
}

impl NoteMut for Diagnostic {
    fn with_note_mut(&mut self, message: &str, location: Location) -> &mut Self {
        self.notes.push(crate::diag::Note { message: message.to_owned(), location });
        self
    }
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

/// The first keys of a tool's, prompt's or argument's wire form: `name`, then
/// `title` and `description` when the catalog gives them.
fn wire_head(name: &str, title: Option<&String>, description: Option<&String>) -> Map<String, Value> {
    let mut wire = Map::new();
    wire.insert("name".to_owned(), json!(name));
    if let Some(title) = title {
        wire.insert("title".to_owned(), json!(title));
    }
    if let Some(description) = description {
        wire.insert("description".to_owned(), json!(description));
    }
    wire
}

/// The keys of `keys` that are present, in order (for "exactly one of" checks).
fn present<'a>(keys: impl IntoIterator<Item = (&'a str, bool)>) -> Vec<&'a str> {
    keys.into_iter().filter_map(|(key, present)| present.then_some(key)).collect()
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

/// Checks each effect's block (see [`effect::block::Block::check`]),
/// reusing what `previous` (the catalog this one replaces) opened.
struct CheckBlocks<'a> {
    assembled: &'a Assembled,
    previous: Option<&'a Catalog>,
    diagnostics: &'a mut Vec<Diagnostic>,
}

impl Build<Checking> for CheckBlocks<'_> {
    fn build<B: Registered>(&mut self) -> Checked<B> {
        let declared = declared_block(self.assembled, B::of(&self.assembled.blocks));
        let previous = self.previous.map(|catalog| B::of(&catalog.blocks));
        let block = B::check(&declared, previous, self.diagnostics);
        Checked { block, left_out: self.assembled.dropped.block(B::KEY) }
    }
}

/// What the catalog keeps of each checked block: its entries that can serve.
struct KeepBlocks(Blocks<Checking>);

impl Build<Kept> for KeepBlocks {
    fn build<B: Registered>(&mut self) -> indexmap::IndexMap<String, B::Entry> {
        std::mem::take(B::of_mut(&mut self.0)).block.into_entries()
    }
}

/// The files the blocks' checks read (a reload watches them).
struct BlockFiles(Vec<PathBuf>);

impl<'a> effect::block::Each<'a, Checking> for BlockFiles {
    fn each<B: Registered>(&mut self, block: &'a Checked<B>) {
        self.0.extend(block.block.files().iter().cloned());
    }
}

/// The entries of an effect's block (`databases:`, `apis:`) as its check reads them.
fn declared_block<'a, S>(
    assembled: &'a Assembled,
    block: &'a indexmap::IndexMap<String, Declared<S>>,
) -> Vec<effect::Declared<'a, S>> {
    block
        .iter()
        .map(|(name, decl)| effect::Declared {
            name,
            spec: &decl.spec,
            base: assembled.base_dir(&decl.origin),
            locate: Box::new(move |pointer| assembled.locate(&decl.origin, pointer)),
        })
        .collect()
}
