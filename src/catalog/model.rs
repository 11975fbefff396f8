//! The catalog format as written in YAML: one struct per block, with serde
//! names equal to the keys a person types.
//!
//! These types are the single source of truth for the format: `carte schema`
//! derives its JSON Schema from them, and structural validation (unknown keys,
//! missing keys, wrong types) checks each file against that same schema before
//! serde reads it. Keys that exist on the MCP wire keep their MCP spelling
//! (`inputSchema`, `mimeType`, `uriTemplate` …).
//!
//! Why one file past 600 lines: it is declarations only (no logic), in the
//! order a catalog is written, and its doc comments are the book's "Every
//! key" page and the editors' hovers; read top to bottom it is the format.
//! Each effect's keys, and its own top-level block, live with the effect
//! (`effect::Specs`, `effect::BlockSpecs`, `effect::ReadSpecs`).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use crate::duration::DurationSpec;

/// One catalog file: the root catalog, or a file it includes.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "carte catalog")]
pub struct CatalogFile {
    /// Who the server is: `serverInfo` and `instructions` in MCP's `initialize`.
    #[serde(default)]
    pub server: Option<ServerSpec>,
    /// More catalog files (glob patterns, relative to this file) merged into this one.
    #[serde(default)]
    pub include: Option<Includes>,
    /// Free-form values; every template sees them as `data`.
    #[serde(default)]
    pub data: Option<Map<String, Value>>,
    /// A folder of skills (relative to this file): each folder below it with a
    /// `SKILL.md` is a skill, served with MCP's skills extension (`skills/list`,
    /// `skills/get`, its files as `skill://…` resources) and reloaded when it changes.
    #[serde(default)]
    pub skills: Option<String>,
    /// The effects' own blocks (`databases:`, `apis:`), each declared by
    /// its effect (see `effect::Block`).
    #[serde(flatten)]
    pub blocks: crate::effect::BlockSpecs,
    /// Named subsets of the tools: each name (`A-Z a-z 0-9 _ -`) lists tool
    /// names; its clients see and call only those, at `/mcp/{name}` over HTTP
    /// and with `carte serve --toolset NAME` on stdio.
    #[serde(default)]
    pub toolsets: Option<IndexMap<String, Vec<String>>>,
    /// The tools, in the order `tools/list` returns them.
    #[serde(default)]
    pub tools: Option<Vec<ToolSpec>>,
    /// The prompts, in the order `prompts/list` returns them.
    #[serde(default)]
    pub prompts: Option<Vec<PromptSpec>>,
    /// Resources with fixed URIs.
    #[serde(default)]
    pub resources: Option<Vec<ResourceSpec>>,
    /// Resources whose URIs follow an RFC 6570 template.
    #[serde(default, rename = "resourceTemplates")]
    pub resource_templates: Option<Vec<ResourceTemplateSpec>>,
}

/// `include:` one glob pattern or a list of them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "include patterns")]
pub enum Includes {
    /// A single pattern.
    One(String),
    /// Several patterns.
    Many(Vec<String>),
}

impl Includes {
    /// The patterns, however they were written.
    pub fn patterns(&self) -> Vec<&str> {
        match self {
            Includes::One(one) => vec![one.as_str()],
            Includes::Many(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// The `server:` block.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "server")]
pub struct ServerSpec {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version` (quote it: `"1.0"`, not `1.0`).
    #[serde(default)]
    pub version: Option<String>,
    /// `serverInfo.title`, a display name.
    #[serde(default)]
    pub title: Option<String>,
    /// `serverInfo.description`.
    #[serde(default)]
    pub description: Option<String>,
    /// `serverInfo.websiteUrl`.
    #[serde(default, rename = "websiteUrl")]
    pub website_url: Option<String>,
    /// Passed to clients as `instructions` in `initialize`.
    #[serde(default)]
    pub instructions: Option<String>,
    /// The folder of `template:` files, relative to this file (default: `templates/` beside the catalog).
    #[serde(default)]
    pub templates: Option<String>,
    /// Icons a client may show for the server.
    #[serde(default)]
    pub icons: Option<Vec<crate::catalog::presentation::IconSpec>>,
    /// How long clients may keep lists, `server/discover` and reads (`ttlMs`, `cacheScope`);
    /// default: not at all (`ttlMs` 0).
    #[serde(default)]
    pub cache: Option<crate::catalog::presentation::CacheSpec>,
    /// How many tool calls one caller may make in a while, all tools together.
    #[serde(default, rename = "rateLimit")]
    pub rate_limit: Option<crate::catalog::rate_limit::RateLimitSpec>,
    /// How clients find the tools: `list` (default: `tools/list` holds them all) or
    /// `search`, for large catalogs: `tools/list` holds a `find_tools` tool and the
    /// `pinned` ones, and each session's list grows with what it found.
    #[serde(default)]
    pub discovery: Option<Discovery>,
}

/// How clients find a catalog's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(title = "discovery")]
pub enum Discovery {
    /// `tools/list` holds every tool.
    #[default]
    List,
    /// `tools/list` holds `find_tools` and the pinned tools; found tools join a session's list.
    Search,
}

/// A tool: what `tools/list` shows and what `tools/call` does.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "tool")]
pub struct ToolSpec {
    /// 1–128 characters of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// Tells the model what the tool does and when to use it.
    #[serde(default)]
    pub description: Option<String>,
    /// JSON Schema (2020-12) of the arguments; `type: object` at the top.
    #[serde(default, rename = "inputSchema")]
    pub input_schema: Option<Map<String, Value>>,
    /// JSON Schema of `structuredContent`; the rendered result must be JSON that matches it.
    #[serde(default, rename = "outputSchema")]
    pub output_schema: Option<Map<String, Value>>,
    /// MCP tool annotations.
    #[serde(default)]
    pub annotations: Option<ToolAnnotationsSpec>,
    /// Icons a client may show beside it.
    #[serde(default)]
    pub icons: Option<Vec<crate::catalog::presentation::IconSpec>>,
    /// MCP Apps: the `ui://` resource (one with `app:`) a client shows for the tool's result.
    #[serde(default)]
    pub ui: Option<String>,
    /// How many calls of this tool one caller may make in a while.
    #[serde(default, rename = "rateLimit")]
    pub rate_limit: Option<crate::catalog::rate_limit::RateLimitSpec>,
    /// With `server.discovery: search`: listed from the start, without a search.
    #[serde(default)]
    pub pinned: Option<bool>,
    /// Runs the tool as a task (the `io.modelcontextprotocol/tasks` extension):
    /// the client gets a task id at once and polls `tasks/get` for the result.
    #[serde(default)]
    pub task: Option<TaskSpec>,
    /// OAuth scopes a caller's access token must grant to see and call the
    /// tool (all of them), when carte serves HTTP with `--oauth-issuer`;
    /// ignored otherwise. Each is a scope token: no spaces or quotes.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// What the tool does.
    pub run: RunSpec,
    /// Calls and what their answers must be: `carte check` checks them, `carte test` runs them.
    #[serde(default)]
    pub examples: Option<Vec<crate::catalog::examples::ExampleSpec>>,
}

/// A tool's `task`: how it runs as a task.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "task")]
pub struct TaskSpec {
    /// `optional` (default): a task for clients that declared the tasks
    /// extension, an ordinary call for the others; `required`: only as a task.
    #[serde(default)]
    pub mode: Option<TaskMode>,
    /// How long a task is kept: its run may last that long, and its result
    /// stays readable that long after it settled. Default `5m`, at most `24h`.
    #[serde(default)]
    pub ttl: Option<DurationSpec>,
    /// How often clients should poll `tasks/get`. Default `1s`, at least `100ms`.
    #[serde(default, rename = "pollInterval")]
    pub poll_interval: Option<DurationSpec>,
    /// The `elicit`/`sample` steps at the start of `run.steps` are asked on
    /// the call itself, before the task exists; the task runs the rest.
    #[serde(default, rename = "askFirst")]
    pub ask_first: Option<bool>,
}

/// Whether a tool runs as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(title = "task mode")]
pub enum TaskMode {
    /// A task when the client declared the tasks extension, else an ordinary call.
    #[default]
    Optional,
    /// Only as a task: a client that did not declare the extension gets an error.
    Required,
}

/// MCP tool annotations (hints for clients).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "tool annotations")]
pub struct ToolAnnotationsSpec {
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// The tool does not change anything.
    #[serde(default, rename = "readOnlyHint")]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy or overwrite things.
    #[serde(default, rename = "destructiveHint")]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments does nothing more.
    #[serde(default, rename = "idempotentHint")]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches outside systems.
    #[serde(default, rename = "openWorldHint")]
    pub open_world_hint: Option<bool>,
}

/// A tool's `run`: at most one effect, then what renders the result.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "run")]
pub struct RunSpec {
    /// Its effect: one key per effect (`sql`), each with its own spec.
    #[serde(flatten)]
    pub effects: crate::effect::Specs,
    /// Inline minijinja template of the result text.
    #[serde(default)]
    pub text: Option<String>,
    /// A file in the templates folder that renders the result text.
    #[serde(default)]
    pub template: Option<String>,
    /// A list of content blocks (text, image, audio, resource, resource_link).
    #[serde(default)]
    pub content: Option<Vec<ContentSpec>>,
    /// The rendered text is JSON: it also becomes `structuredContent`.
    #[serde(default)]
    pub json: Option<bool>,
    /// Steps taken in order before the effect and the result: log, progress,
    /// sleep, elicit, sample, roots, ask.
    #[serde(default)]
    pub steps: Option<Vec<StepSpec>>,
}

/// One step of `steps`; exactly one of its keys.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "step")]
pub struct StepSpec {
    /// Sends a log message (`notifications/message`) to the calling client, at its level.
    #[serde(default)]
    pub log: Option<LogStepSpec>,
    /// Sends `notifications/progress` when the call carried a progress token.
    #[serde(default)]
    pub progress: Option<ProgressStepSpec>,
    /// Waits, e.g. `50ms`, `2s`, a number of milliseconds, or a template rendering
    /// a duration on each call (`"{{ seconds }}s"`); at most 10m.
    #[serde(default)]
    pub sleep: Option<SleepSpec>,
    /// Asks the user for input (`elicitation/create`); the answer is `elicited`.
    #[serde(default)]
    pub elicit: Option<ElicitStepSpec>,
    /// Asks the client's model (`sampling/createMessage`); the reply is `sampled`.
    #[serde(default)]
    pub sample: Option<SampleStepSpec>,
    /// Asks the client for its roots (`roots/list`); the list is `roots`.
    #[serde(default)]
    pub roots: Option<RootsStepSpec>,
    /// Several `elicit`, `sample` and `roots` steps asked together, in one round; their
    /// templates see only what came before the `ask`.
    #[serde(default)]
    pub ask: Option<Vec<StepSpec>>,
}

/// A `log` step.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "log step")]
pub struct LogStepSpec {
    /// The MCP log level.
    pub level: LogLevel,
    /// What is logged: a string is a template; other values are sent as written.
    pub data: Value,
    /// The logger name (default: `carte.tools`).
    #[serde(default)]
    pub logger: Option<String>,
}

/// MCP log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
#[schemars(title = "log level")]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// A `progress` step.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "progress step")]
pub struct ProgressStepSpec {
    /// How far along: a number, or a template rendering one.
    pub progress: NumberSpec,
    /// Out of how much (optional).
    #[serde(default)]
    pub total: Option<NumberSpec>,
    /// A template of a message for people (optional).
    #[serde(default)]
    pub message: Option<String>,
}

/// A number, or a template that renders one.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "number or template")]
pub enum NumberSpec {
    /// A number as written.
    Number(f64),
    /// A template rendering a number.
    Template(String),
}

/// How long a `sleep` step waits.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "duration")]
pub enum SleepSpec {
    /// Milliseconds.
    Millis(u64),
    /// `250ms`, `2s`, `1m`, or a template rendering one.
    Text(String),
}

/// An `elicit` step.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "elicit step")]
pub struct ElicitStepSpec {
    /// The answer's name in `answers` and in `inputRequests` (default `stepN`, N the step's number).
    #[serde(default)]
    pub key: Option<String>,
    /// Skip the step when the client cannot answer it (did not declare `elicitation`); default false.
    #[serde(default)]
    pub optional: Option<bool>,
    /// A template of what to ask the user.
    pub message: String,
    /// The form: a flat JSON Schema object of primitive properties (or `url`).
    #[serde(default, rename = "requestedSchema")]
    pub requested_schema: Option<Map<String, Value>>,
    /// Instead of a form, a page to send the user to (a template, e.g.
    /// `https://shop.example/pay?order={{ order }}`): URL-mode elicitation, for
    /// what must not pass through the client (a payment, a sign-in). The
    /// answer says whether the user went (`accept`), not what they entered.
    #[serde(default)]
    pub url: Option<String>,
}

/// A `sample` step.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "sample step")]
pub struct SampleStepSpec {
    /// The answer's name in `answers` and in `inputRequests` (default `stepN`, N the step's number).
    #[serde(default)]
    pub key: Option<String>,
    /// Skip the step when the client cannot answer it (did not declare `sampling`); default false.
    #[serde(default)]
    pub optional: Option<bool>,
    /// The conversation to send; each text is a template.
    pub messages: Vec<SampleMessageSpec>,
    /// The most tokens the client's model may produce.
    #[serde(rename = "maxTokens")]
    pub max_tokens: u32,
    /// A template of the system prompt (optional).
    #[serde(default, rename = "systemPrompt")]
    pub system_prompt: Option<String>,
}

/// A `roots` step.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "roots step")]
pub struct RootsStepSpec {
    /// The answer's name in `answers` and in `inputRequests` (default `stepN`, N the step's number).
    #[serde(default)]
    pub key: Option<String>,
    /// Skip the step when the client cannot answer it (did not declare `roots`); default false.
    #[serde(default)]
    pub optional: Option<bool>,
}

/// One message of a `sample` step.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "sample message")]
pub struct SampleMessageSpec {
    /// `user` or `assistant`.
    pub role: Role,
    /// A template of the message text.
    pub text: String,
}

/// One content block of a tool result or a prompt message.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "content block")]
pub struct ContentSpec {
    /// Inline minijinja template of a text block.
    #[serde(default)]
    pub text: Option<String>,
    /// A template file rendering a text block.
    #[serde(default)]
    pub template: Option<String>,
    /// An image from a file or base64 data.
    #[serde(default)]
    pub image: Option<MediaSpec>,
    /// Audio from a file or base64 data.
    #[serde(default)]
    pub audio: Option<MediaSpec>,
    /// Embeds the resource with this URI (a template) as a resource block.
    #[serde(default)]
    pub resource: Option<String>,
    /// A link to a resource, without its content.
    #[serde(default)]
    pub resource_link: Option<ResourceLinkSpec>,
}

/// An image or audio clip.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "image or audio")]
pub struct MediaSpec {
    /// A file, relative to the catalog file; read at load.
    #[serde(default)]
    pub file: Option<String>,
    /// Base64 data.
    #[serde(default)]
    pub data: Option<String>,
    /// Its MIME type; guessed from the file's extension when absent.
    #[serde(default, rename = "mimeType")]
    pub mime_type: Option<String>,
}

/// A resource link block.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "resource link")]
pub struct ResourceLinkSpec {
    /// The linked URI (a template).
    pub uri: String,
    /// The resource's name.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(default, rename = "mimeType")]
    pub mime_type: Option<String>,
}

/// A prompt.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "prompt")]
pub struct PromptSpec {
    /// 1–128 characters of `A-Z a-z 0-9 _ . -`.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// What the prompt is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Icons a client may show beside it.
    #[serde(default)]
    pub icons: Option<Vec<crate::catalog::presentation::IconSpec>>,
    /// The arguments a client fills in (always strings).
    #[serde(default)]
    pub arguments: Option<Vec<ArgumentSpec>>,
    /// Steps taken before the messages render (log, progress, sleep, elicit, sample, roots,
    /// ask); the messages see `answers`, `elicited`, `sampled` and `roots`.
    #[serde(default)]
    pub steps: Option<Vec<StepSpec>>,
    /// The messages, rendered in order.
    pub messages: Vec<MessageSpec>,
    /// Calls and what their answers must be: `carte check` checks them, `carte test` runs them.
    #[serde(default)]
    pub examples: Option<Vec<crate::catalog::examples::ExampleSpec>>,
}

/// A prompt argument.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "prompt argument")]
pub struct ArgumentSpec {
    /// The name templates use.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// What to fill in.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether `prompts/get` must carry it (default false).
    #[serde(default)]
    pub required: Option<bool>,
    /// Values offered by `completion/complete`.
    #[serde(default)]
    pub complete: Option<Vec<String>>,
}

/// Who speaks a prompt message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(title = "role")]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// One prompt message: a role and one content block.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "prompt message")]
pub struct MessageSpec {
    /// `user` or `assistant`.
    pub role: Role,
    /// Inline minijinja template.
    #[serde(default)]
    pub text: Option<String>,
    /// A template file.
    #[serde(default)]
    pub template: Option<String>,
    /// Embeds the resource with this URI.
    #[serde(default)]
    pub resource: Option<String>,
    /// An image from a file or base64 data.
    #[serde(default)]
    pub image: Option<MediaSpec>,
    /// Audio from a file or base64 data.
    #[serde(default)]
    pub audio: Option<MediaSpec>,
}

impl MessageSpec {
    /// The message's content as a content block.
    pub fn block(&self) -> ContentSpec {
        ContentSpec {
            text: self.text.clone(),
            template: self.template.clone(),
            image: self.image.clone(),
            audio: self.audio.clone(),
            resource: self.resource.clone(),
            resource_link: None,
        }
    }
}

/// A resource with a fixed URI.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "resource")]
pub struct ResourceSpec {
    /// Its URI, such as `reservo://policy`.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// What it holds.
    #[serde(default)]
    pub description: Option<String>,
    /// Its MIME type (guessed from `file`'s extension when absent).
    #[serde(default, rename = "mimeType")]
    pub mime_type: Option<String>,
    /// Inline minijinja template of its body.
    #[serde(default)]
    pub text: Option<String>,
    /// A template file rendering its body.
    #[serde(default)]
    pub template: Option<String>,
    /// A file served raw (relative to this catalog file); binary types as base64 blobs.
    #[serde(default)]
    pub file: Option<String>,
    /// An MCP App: an HTML page served as `text/html;profile=mcp-app`, with what it may reach.
    #[serde(default)]
    pub app: Option<crate::catalog::presentation::AppSpec>,
    /// Icons a client may show beside it.
    #[serde(default)]
    pub icons: Option<Vec<crate::catalog::presentation::IconSpec>>,
    /// How long clients may keep what a read gives (`ttlMs`, `cacheScope`); default: the server's `cache`.
    #[serde(default)]
    pub cache: Option<crate::catalog::presentation::CacheSpec>,
    /// The effect a read runs (`sql`, `http`, `command`: at most one), whose output the body sees.
    #[serde(flatten)]
    pub reads: crate::effect::ReadSpecs,
    /// Steps taken on each read before the body renders (log, progress, sleep, elicit, sample,
    /// roots, ask); the body sees `answers`, `elicited`, `sampled` and `roots`.
    #[serde(default)]
    pub steps: Option<Vec<StepSpec>>,
    /// Calls and what their answers must be: `carte check` checks them, `carte test` runs them.
    #[serde(default)]
    pub examples: Option<Vec<crate::catalog::examples::ExampleSpec>>,
}

/// A resource template (RFC 6570 URI template).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "resource template")]
pub struct ResourceTemplateSpec {
    /// Such as `reservo://rooms/{room}`.
    #[serde(rename = "uriTemplate")]
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// A display name.
    #[serde(default)]
    pub title: Option<String>,
    /// What it holds.
    #[serde(default)]
    pub description: Option<String>,
    /// Icons a client may show beside it.
    #[serde(default)]
    pub icons: Option<Vec<crate::catalog::presentation::IconSpec>>,
    /// How long clients may keep what a read gives (`ttlMs`, `cacheScope`); default: the server's `cache`.
    #[serde(default)]
    pub cache: Option<crate::catalog::presentation::CacheSpec>,
    /// Its MIME type.
    #[serde(default, rename = "mimeType")]
    pub mime_type: Option<String>,
    /// Inline minijinja template of its body; sees the URI's variables.
    #[serde(default)]
    pub text: Option<String>,
    /// A template file rendering its body.
    #[serde(default)]
    pub template: Option<String>,
    /// The effect a read runs (`sql`, `http`, `command`: at most one), whose output the body sees.
    #[serde(flatten)]
    pub reads: crate::effect::ReadSpecs,
    /// Values offered by `completion/complete`, per URI variable.
    #[serde(default)]
    pub complete: Option<IndexMap<String, Vec<String>>>,
    /// Steps taken on each read before the body renders (log, progress, sleep, elicit, sample,
    /// roots, ask); the body sees the URI's variables, `answers`, `elicited`, `sampled` and `roots`.
    #[serde(default)]
    pub steps: Option<Vec<StepSpec>>,
    /// Calls and what their answers must be: `carte check` checks them, `carte test` runs them.
    #[serde(default)]
    pub examples: Option<Vec<crate::catalog::examples::ExampleSpec>>,
}
