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

pub mod examples;
pub mod model;
pub mod presentation;
pub mod rate_limit;
pub mod reference;
pub mod schema;
pub mod source;
pub mod structure;

mod assemble;
mod blocks;
mod build;
mod inputs;

pub use build::valid_toolset_name;
mod lint;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::diag::Diagnostic;
use crate::effect::block::Kept;
use crate::effect::{Blocks, Effect, ReadEffect};
use crate::uri_template::UriTemplate;

pub use blocks::Unready;
pub use inputs::{Fingerprint, IncludePattern, Inputs};
pub use model::Role;

/// A validated catalog, ready to serve.
pub struct Catalog {
    /// Whether the server or a tool has a `rateLimit` (calls are counted).
    pub rate_limited: bool,
    /// The `skills:` folder, if any (the server reads the skills in it).
    pub skills: Option<std::path::PathBuf>,
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
    /// The effects' blocks, each entry by name: databases (with the `setup`
    /// each needs applied before serving), APIs (each with its connection
    /// pool).
    pub blocks: Blocks<Kept>,
    /// What it was built from (what a reload watches).
    pub inputs: Inputs,
    /// Its `examples:`, in file order (`carte test` runs them).
    pub examples: Vec<examples::Example>,
    tool_index: Index,
    prompt_index: Index,
    resource_index: Index,
}

/// Where each tool, prompt or resource is by its name or URI: looked up on
/// every request by what a client sent (never inserted into), with a fast
/// hash rather than std's SipHash.
type Index = HashMap<String, usize, foldhash::fast::RandomState>;

/// The tool clients search with under `server.discovery: search`.
pub const FIND_TOOLS: &str = "find_tools";

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
    /// `serverInfo.icons`, as the wire carries them.
    pub icons: Option<Value>,
    /// How long clients may keep lists, discovery and reads.
    pub cache: Option<presentation::Cache>,
    /// How many tool calls one caller may make in a while, all tools together.
    pub rate_limit: Option<rate_limit::RateLimit>,
    /// `discovery: search`: clients find tools with `find_tools`.
    pub search: bool,
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
    /// How many calls of it one caller may make in a while.
    pub rate_limit: Option<rate_limit::RateLimit>,
    /// Listed from the start when clients search for tools (`pinned: true`).
    pub pinned: bool,
    /// The arguments it takes if they are closed (see
    /// [`Tool::closed_arguments`]), found on its first call.
    pub(in crate::catalog) closed_to: std::sync::OnceLock<Option<ArgumentNames>>,
}

/// A tool's argument names, looked up on every call by what a client sent.
type ArgumentNames = std::collections::HashSet<String, foldhash::fast::RandomState>;

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
    /// Whether its arguments are only those its `inputSchema` lists: it
    /// lists `properties` and does not open `additionalProperties`. A call
    /// (by a client or `carte call`) with another is refused, naming it.
    pub fn closed_arguments(&self) -> bool {
        self.closed_to().is_some()
    }

    /// The first of `given` it does not take, if its arguments are closed
    /// (see [`Tool::closed_arguments`]); allocates nothing after the
    /// tool's first call.
    pub fn undeclared_argument<'a>(&self, mut given: impl Iterator<Item = &'a str>) -> Option<&'a str> {
        let names = self.closed_to()?;
        given.find(|name| !names.contains(*name))
    }

    /// The arguments it takes, if they are closed: its schema's
    /// `properties`, when it does not open `additionalProperties`.
    fn closed_to(&self) -> Option<&ArgumentNames> {
        let closed = || {
            let schema = self.wire.get("inputSchema")?;
            let opened = schema.get("additionalProperties").is_some_and(|more| more != &Value::Bool(false));
            let properties = schema.get("properties")?.as_object().filter(|_| !opened)?;
            Some(properties.keys().cloned().collect())
        };
        self.closed_to.get_or_init(closed).as_ref()
    }

    /// The arguments its `inputSchema` lists, in order.
    pub fn argument_names(&self) -> Vec<&str> {
        let properties = self.wire.get("inputSchema").and_then(|s| s.get("properties")).and_then(Value::as_object);
        properties.into_iter().flatten().map(|(name, _)| name.as_str()).collect()
    }

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
    /// Send the user to a page (URL-mode elicitation: a payment, a sign-in);
    /// the answer (accept, decline or cancel) becomes `elicited`.
    ElicitUrl {
        /// The message's template.
        message: String,
        /// The page's template (rendered and checked to be an http(s) URL).
        url: String,
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
            InputKind::Elicit { .. } | InputKind::ElicitUrl { .. } => "elicitation/create",
            InputKind::Sample { .. } => "sampling/createMessage",
            InputKind::Roots => "roots/list",
        }
    }

    /// The client capability it needs: `elicitation`, `elicitation.url`
    /// (its `url` mode), `sampling` or `roots`.
    pub fn capability(&self) -> &'static str {
        match self {
            InputKind::Elicit { .. } => "elicitation",
            InputKind::ElicitUrl { .. } => "elicitation.url",
            InputKind::Sample { .. } => "sampling",
            InputKind::Roots => "roots",
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
    /// The effect whose output its body sees, run on each read, if it has one.
    pub read: Option<ReadEffect>,
    /// Steps taken on each read, before the body renders.
    pub steps: Vec<Step>,
    /// How long clients may keep a read (else the server's `cache`).
    pub cache: Option<presentation::Cache>,
    /// The `_meta` its contents carry when read (an app's `ui`).
    pub meta: Option<Value>,
}

/// A resource body.
pub enum Body {
    /// The value of its effect (a string as it is, anything else as JSON).
    Value,
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
    /// The template rendering its body; `None`: the value of its effect
    /// (see [`Body::Value`]).
    pub body: Option<String>,
    /// The effect whose output its body sees, run on each read, if it has one.
    pub read: Option<ReadEffect>,
    /// Completion values per variable.
    pub complete: IndexMap<String, Vec<String>>,
    /// Steps taken on each read, before the body renders.
    pub steps: Vec<Step>,
    /// How long clients may keep a read (else the server's `cache`).
    pub cache: Option<presentation::Cache>,
}

impl Catalog {
    /// The entries of the effects' blocks (databases) whose writes change
    /// what a resource reads (see [`ReadEffect::watches`]), each once.
    pub fn watched(&self) -> Vec<&str> {
        let reads = self.resources.iter().map(|r| &r.read).chain(self.resource_templates.iter().map(|t| &t.read));
        let mut watched: Vec<&str> = reads.flatten().filter_map(ReadEffect::watches).collect();
        watched.sort_unstable();
        watched.dedup();
        watched
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
mod tests;
