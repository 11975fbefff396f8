//! The catalog: loading YAML files into a validated, immutable [`Catalog`].
//!
//! Loading runs in stages, each reporting every problem it finds before the
//! next one starts:
//! 1. [`source`]: read each file (YAML → JSON, `${VAR}` expanded, positions kept);
//! 2. [`structure`]: check each file against the format's schema ([`model`]),
//!    and `lint` what YAML reads differently from what was meant (`no`, ` #`);
//! 3. [`assemble`]: follow `include:` globs and merge the files;
//! 4. [`build`]: semantic checks (names, duplicates, JSON Schemas, templates
//!    and their variables, resources, and each tool's effect through its
//!    module in [`crate::effect`]) while building the runtime form.
//!
//! The catalog depends on [`crate::effect`] (the effects' specs, checks and
//! checked forms) and never on `run` or `server`, which depend on it.
//!
//! **Invariant:** a `Catalog` only exists if it had no errors; it never
//! changes after it is built (a reload builds a new one), so a request that
//! holds an `Arc<Catalog>` sees one consistent menu from start to end.

pub mod model;
pub mod reference;
pub mod schema;
pub mod source;
pub mod structure;

mod assemble;
mod build;

pub use build::valid_toolset_name;
mod lint;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::diag::Diagnostic;
use crate::effect::Effect;
use crate::effect::sql::{DatabaseEntry, Query};
use crate::uri_template::UriTemplate;

pub use model::Role;

/// A validated catalog, ready to serve.
pub struct Catalog {
    /// `serverInfo` and `instructions`.
    pub server: ServerInfo,
    /// Tools in declaration order.
    pub tools: Vec<Tool>,
    /// Prompts in declaration order.
    pub prompts: Vec<Prompt>,
    /// Resources in declaration order.
    pub resources: Vec<Resource>,
    /// Resource templates in declaration order.
    pub resource_templates: Vec<ResourceTemplate>,
    /// Toolsets by name: the names of their tools, in declaration order.
    pub toolsets: IndexMap<String, Vec<String>>,
    /// Every template of this catalog, compiled on first use.
    pub templates: crate::render::Templates,
    /// The merged `data:` blocks, as templates see them.
    pub data: minijinja::Value,
    /// Databases by name, with the `setup` each needs applied before serving.
    pub databases: IndexMap<String, DatabaseEntry>,
    /// APIs by name, each with its connection pool.
    pub apis: IndexMap<String, std::sync::Arc<crate::effect::http::Api>>,
    /// What it was built from (what a reload watches).
    pub inputs: Inputs,
    tool_index: HashMap<String, usize>,
    prompt_index: HashMap<String, usize>,
    resource_index: HashMap<String, usize>,
}

/// Who the server says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `serverInfo.title`.
    pub title: Option<String>,
    /// `serverInfo.description`.
    pub description: Option<String>,
    /// `serverInfo.websiteUrl`.
    pub website_url: Option<String>,
    /// `instructions`.
    pub instructions: Option<String>,
}

/// A tool, ready to list and call.
pub struct Tool {
    /// Its name.
    pub name: String,
    /// Exactly what `tools/list` shows for it.
    pub wire: Map<String, Value>,
    /// `inputSchema`, compiled on the tool's first call.
    pub input: Schema,
    /// `outputSchema`, compiled on the tool's first call.
    pub output: Option<Schema>,
    /// Whether the rendered text is JSON that also becomes `structuredContent`.
    pub structured: bool,
    /// Steps taken before the effect (log, progress, sleep, elicit, sample).
    pub steps: Vec<Step>,
    /// What the tool does before rendering.
    pub effect: Option<Effect>,
    /// How the result is rendered.
    pub result: ResultSpec,
    /// How it runs as a task, if it may.
    pub task: Option<TaskOptions>,
    /// The OAuth scopes a caller needs to see and call it (`scopes:`).
    pub scopes: Vec<String>,
}

/// A tool's `task:`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskOptions {
    /// Optional or required.
    pub mode: model::TaskMode,
    /// How long a task is kept (running, then after it settled).
    pub ttl: std::time::Duration,
    /// How often clients should poll.
    pub poll_interval: std::time::Duration,
    /// How many leading steps (`elicit`/`sample`) are asked before the task
    /// exists (`askFirst`); 0 without it.
    pub ask_first: usize,
}

/// A JSON Schema of a tool, checked when the catalog loads and compiled
/// once, when the tool is first called: a compiled validator costs a few
/// KiB, which a 10,000-tool catalog should not pay for tools never called.
/// The schema itself lives in the tool's `wire` form.
#[derive(Default)]
pub struct Schema {
    compiled: std::sync::OnceLock<Result<jsonschema::Validator, String>>,
}

impl Tool {
    /// The compiled `inputSchema`.
    pub fn input_validator(&self) -> Result<&jsonschema::Validator, &str> {
        compiled(&self.input, self.wire.get("inputSchema"))
    }

    /// The compiled `outputSchema`, if the tool has one.
    pub fn output_validator(&self) -> Option<Result<&jsonschema::Validator, &str>> {
        self.output.as_ref().map(|schema| compiled(schema, self.wire.get("outputSchema")))
    }
}

fn compiled<'a>(schema: &'a Schema, source: Option<&Value>) -> Result<&'a jsonschema::Validator, &'a str> {
    schema
        .compiled
        .get_or_init(|| match source {
            Some(source) => jsonschema::validator_for(source).map_err(|err| err.to_string()),
            None => Err("the schema is missing".to_owned()),
        })
        .as_ref()
        .map_err(String::as_str)
}

/// One step of a tool's `run.steps`, checked and ready to run. Texts are
/// names of templates in the catalog's environment.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send a log message to the calling client.
    Log {
        /// Its level.
        level: model::LogLevel,
        /// Its logger (default `carte.tools`).
        logger: Option<String>,
        /// What is logged.
        data: StepData,
    },
    /// Send `notifications/progress` (when the call has a progress token).
    Progress {
        /// How far along.
        progress: Amount,
        /// Out of how much.
        total: Option<Amount>,
        /// A message template.
        message: Option<String>,
    },
    /// Wait.
    Sleep(Wait),
    /// Ask the client one question (one round).
    Input(Input),
    /// Ask the client several questions together (one round).
    Ask(Vec<Input>),
}

/// An input step: a question for the client (`elicit`, `sample`, `roots`).
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// The answer's name in `answers` and in `inputRequests`.
    pub key: String,
    /// Skipped when the client cannot answer it.
    pub optional: bool,
    /// What is asked.
    pub kind: InputKind,
}

/// What an input step asks.
#[derive(Debug, Clone, PartialEq)]
pub enum InputKind {
    /// Ask the user; the answer becomes `elicited`.
    Elicit {
        /// The question's template.
        message: String,
        /// The form, as declared.
        schema: Value,
    },
    /// Ask the client's model; the reply becomes `sampled`.
    Sample {
        /// Roles and text templates.
        messages: Vec<(Role, String)>,
        /// Token limit.
        max_tokens: u32,
        /// The system prompt's template.
        system: Option<String>,
    },
    /// Ask the client for its roots; the list becomes `roots`.
    Roots,
}

impl InputKind {
    /// The MCP method that asks it.
    pub fn method(&self) -> &'static str {
        match self {
            InputKind::Elicit { .. } => "elicitation/create",
            InputKind::Sample { .. } => "sampling/createMessage",
            InputKind::Roots => "roots/list",
        }
    }
}

impl Step {
    /// The questions this step asks: none, one, or an `ask`'s.
    pub fn inputs(&self) -> &[Input] {
        match self {
            Step::Input(input) => std::slice::from_ref(input),
            Step::Ask(inputs) => inputs,
            _ => &[],
        }
    }
}

/// What a `log` step sends.
#[derive(Debug, Clone, PartialEq)]
pub enum StepData {
    /// A template's output.
    Template(String),
    /// A value as written.
    Literal(Value),
}

/// How long a `sleep` step waits: as written (checked at load), or what a
/// template renders on each call (checked then).
#[derive(Debug, Clone, PartialEq)]
pub enum Wait {
    /// As written.
    Fixed(std::time::Duration),
    /// A template rendering a duration, e.g. `{{ seconds }}s`.
    Template(String),
}

/// A number in a step: as written, or a template's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Amount {
    /// As written.
    Number(f64),
    /// A template rendering a number.
    Template(String),
}

/// How a tool's result is rendered.
pub enum ResultSpec {
    /// One text block from this template.
    Text(String),
    /// These content blocks.
    Content(Vec<Block>),
    /// The effect's result, as JSON text.
    EffectJson,
}

/// One content block of a tool result or prompt message, as declared.
#[derive(Debug, Clone)]
pub enum Block {
    /// Text from the named template.
    Text(String),
    /// An image or audio clip, read at load.
    Media {
        /// Image or audio.
        kind: MediaKind,
        /// Base64 data.
        data: Arc<str>,
        /// Its MIME type.
        mime_type: String,
    },
    /// The resource whose URI the named template renders, embedded.
    Resource(String),
    /// A link to a resource; `uri` is a template name.
    ResourceLink {
        /// Template rendering the URI.
        uri: String,
        /// The resource's name.
        name: String,
        /// A display name.
        title: Option<String>,
        /// What it is.
        description: Option<String>,
        /// Its MIME type.
        mime_type: Option<String>,
    },
}

/// Image or audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// `image` content.
    Image,
    /// `audio` content.
    Audio,
}

/// A prompt, ready to list and render.
pub struct Prompt {
    /// Its name.
    pub name: String,
    /// Exactly what `prompts/list` shows for it.
    pub wire: Map<String, Value>,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
    /// Steps taken before the messages render.
    pub steps: Vec<Step>,
    /// Its messages.
    pub messages: Vec<(Role, Block)>,
}

/// A prompt argument.
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// Whether `prompts/get` must carry it.
    pub required: bool,
    /// Completion values.
    pub complete: Vec<String>,
}

/// A resource with a fixed URI.
pub struct Resource {
    /// Its URI.
    pub uri: String,
    /// Exactly what `resources/list` shows for it.
    pub wire: Map<String, Value>,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// Where its body comes from.
    pub body: Body,
    /// The statement whose rows its body template sees, if it reads a database.
    pub sql: Option<Query>,
    /// Steps taken on each read, before the body renders.
    pub steps: Vec<Step>,
}

/// A resource body.
pub enum Body {
    /// The rows of its `sql` statement, as JSON.
    Rows,
    /// Rendered from the named template.
    Template(String),
    /// A file's bytes, read at load.
    Bytes {
        /// The contents.
        bytes: Arc<[u8]>,
        /// Whether to serve it as text (else as a base64 blob).
        text: bool,
    },
}

/// A resource template.
pub struct ResourceTemplate {
    /// The parsed URI template.
    pub template: UriTemplate,
    /// Exactly what `resources/templates/list` shows for it.
    pub wire: Map<String, Value>,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// The template rendering its body; `None`: the rows of its `sql`
    /// statement, as JSON.
    pub body: Option<String>,
    /// The statement whose rows its body template sees, if it reads a database.
    pub sql: Option<Query>,
    /// Completion values per variable.
    pub complete: IndexMap<String, Vec<String>>,
    /// Steps taken on each read, before the body renders.
    pub steps: Vec<Step>,
}

impl Catalog {
    /// Opens this catalog's databases and applies their `setup` (each only if
    /// it changed since it was last applied), all or nothing. Loading never
    /// does this: call it once the catalog is accepted, before serving it.
    pub fn apply_setup(&self) -> Result<(), Vec<Diagnostic>> {
        let file = self.inputs.files.first().cloned().unwrap_or_default();
        crate::effect::sql::apply_setup(&self.databases, crate::diag::Location::file_start(&file))
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tool_index.get(name).map(|&idx| &self.tools[idx])
    }

    /// The prompt named `name`.
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompt_index.get(name).map(|&idx| &self.prompts[idx])
    }

    /// The resource with exactly this URI.
    pub fn resource(&self, uri: &str) -> Option<&Resource> {
        self.resource_index.get(uri).map(|&idx| &self.resources[idx])
    }

    /// Where the resource with exactly this URI is in `resources`.
    pub fn resource_position(&self, uri: &str) -> Option<usize> {
        self.resource_index.get(uri).copied()
    }

    /// The first resource template that `uri` expands, with its variables.
    /// None for a URI over `uri_template::MAX_URI_BYTES` too:
    /// `uri_template::check_length` tells that case apart.
    pub fn match_template(&self, uri: &str) -> Option<(&ResourceTemplate, Vec<(String, String)>)> {
        self.resource_templates
            .iter()
            .find_map(|template| template.template.match_uri(uri).ok().flatten().map(|vars| (template, vars)))
    }

    /// The resource template whose `uriTemplate` is exactly `uri_template`.
    pub fn resource_template(&self, uri_template: &str) -> Option<&ResourceTemplate> {
        self.resource_templates.iter().find(|t| t.template.as_str() == uri_template)
    }
}

/// What loading produced: a catalog if there were no errors, and every
/// diagnostic (warnings too) either way.
pub struct Loaded {
    /// The catalog, if it is valid.
    pub catalog: Option<Catalog>,
    /// Everything worth telling the author, in file order.
    pub diagnostics: Vec<Diagnostic>,
    /// The files loading read (or tried to), valid or not: a reload watches
    /// these, so fixing a broken include is noticed too.
    pub inputs: Inputs,
}

/// The files a catalog is built from, and the places new ones could appear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Every file read: catalog files, templates, `file:` resources, media.
    pub files: Vec<PathBuf>,
    /// Templates folders (whether or not they exist yet): one per catalog.
    pub templates: Vec<PathBuf>,
    /// The `include:` patterns, resolved.
    pub includes: Vec<IncludePattern>,
    /// What each file held when it was read, in reading order (a file read
    /// twice appears twice): a reload swaps in only a catalog whose files
    /// still hold exactly this, so a file caught half-written is read again.
    pub contents: Vec<(PathBuf, Fingerprint)>,
}

impl Inputs {
    /// Adds what `other` names and this does not (to watch several catalogs,
    /// or a failed load's files beside the served catalog's).
    pub fn merge(&mut self, other: Inputs) {
        fn add<T: PartialEq>(into: &mut Vec<T>, more: Vec<T>) {
            for item in more {
                if !into.contains(&item) {
                    into.push(item);
                }
            }
        }
        add(&mut self.files, other.files);
        add(&mut self.templates, other.templates);
        add(&mut self.includes, other.includes);
        add(&mut self.contents, other.contents);
    }

    /// Notes that loading read `bytes` from `path`.
    pub fn record(&mut self, path: &Path, bytes: &[u8]) {
        if !self.files.iter().any(|file| file == path) {
            self.files.push(path.to_path_buf());
        }
        self.contents.push((path.to_path_buf(), Fingerprint::of(bytes)));
    }

    /// The first file that no longer holds what loading read from it (or
    /// can no longer be read), if any. Reads each file at most once more,
    /// and not at all when its size already differs.
    pub fn changed(&self) -> Option<&Path> {
        self.contents
            .iter()
            .find(|(path, read)| Fingerprint::of_file(path, read.len).ok() != Some(*read))
            .map(|(path, _)| path.as_path())
    }

    /// How many bytes loading read from `path` (the first time), if it read it.
    pub fn len_read(&self, path: &Path) -> Option<u64> {
        self.contents.iter().find(|(file, _)| file == path).map(|(_, read)| read.len)
    }
}

/// What a file held: its length and a hash of its bytes. Only compared
/// within one process, to tell whether a file changed since it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// Its length in bytes.
    pub len: u64,
    /// A 64-bit hash of its bytes.
    pub hash: u64,
}

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Fingerprint {
        use std::hash::Hasher;
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(bytes);
        Fingerprint { len: bytes.len() as u64, hash: hasher.finish() }
    }

    /// The fingerprint of the file at `path` now. When its length is not
    /// `expected_len`, the returned fingerprint has the actual length and
    /// no hash is computed (nothing is read); at most `expected_len + 1`
    /// bytes are read otherwise, whatever the file grows to meanwhile.
    pub fn of_file(path: &Path, expected_len: u64) -> std::io::Result<Fingerprint> {
        use std::io::Read;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len != expected_len {
            return Ok(Fingerprint { len, hash: 0 });
        }
        let mut bytes = Vec::new();
        file.take(expected_len.saturating_add(1)).read_to_end(&mut bytes)?;
        Ok(Fingerprint::of(&bytes))
    }
}

/// One `include:` entry, resolved against the file that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludePattern {
    /// The deepest folder of the pattern without glob characters.
    pub folder: PathBuf,
    /// The whole pattern, e.g. `/srv/catalog/tools/*.yaml`.
    pub pattern: String,
}

/// Loads and validates the catalog at `path`, reading `${VAR}`s from the
/// process environment.
pub fn load(path: &Path) -> Loaded {
    load_with(path, &|name| std::env::var(name).ok(), None)
}

/// Loads the catalog at `path` again, to replace `previous`: databases that
/// are still declared with the same URL stay open (their `setup` runs again
/// only if it changed), so an in-memory database keeps its rows.
pub fn reload(path: &Path, previous: &Catalog) -> Loaded {
    load_with(path, &|name| std::env::var(name).ok(), Some(previous))
}

/// Like [`load`], with the environment given explicitly (for tests), and
/// optionally the catalog this one replaces (see [`reload`]).
pub fn load_with(path: &Path, env: &dyn Fn(&str) -> Option<String>, previous: Option<&Catalog>) -> Loaded {
    let mut diagnostics = Vec::new();
    let mut inputs = Inputs { files: vec![path.to_path_buf()], ..Inputs::default() };
    let assembled = assemble::assemble(path, env, &mut diagnostics);
    if let Some(assembled) = &assembled {
        inputs.files = assembled.files.iter().map(|p| p.file.clone()).collect();
        inputs.includes = assembled.includes.clone();
        inputs.contents = assembled.contents.clone();
    }
    // The semantic stage runs even after mistakes in the files: on what
    // could be read, so one run reports everything.
    let catalog = assembled.and_then(|assembled| build::build(assembled, &mut diagnostics, &mut inputs, previous));
    let catalog = if crate::diag::has_errors(&diagnostics) { None } else { catalog };
    diagnostics.sort_by(|a, b| {
        (&a.location.file, a.location.line, a.location.column).cmp(&(
            &b.location.file,
            b.location.line,
            b.location.column,
        ))
    });
    Loaded { catalog, diagnostics, inputs }
}

/// The catalog of one file's text, for unit tests: written to a scratch
/// folder and loaded (the folder is gone after); panics with the
/// diagnostics if the text has errors.
#[cfg(test)]
pub(crate) fn from_text(yaml: &str) -> Catalog {
    let dir = tempfile::tempdir().expect("a scratch folder");
    let path = dir.path().join("catalog.yaml");
    std::fs::write(&path, yaml).expect("the catalog is written");
    let loaded = load(&path);
    loaded.catalog.unwrap_or_else(|| panic!("{:?}", loaded.diagnostics))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system's temp folder, removed on drop.
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
}
