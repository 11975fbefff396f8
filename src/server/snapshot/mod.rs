//! One catalog as MCP sees it: the catalog plus everything derived from it
//! once (the `initialize` answer, the list items as rmcp types), and the
//! operations that answer MCP requests from it.
//!
//! The operations come in two faces. The handler uses the rmcp-typed ones,
//! visible only inside `server/`. Everything else (the CLI's `carte list`,
//! `call`, `prompt`, `complete`, `read`; reload's diff) uses the same
//! operations through their JSON face, [`Answer`]: the result as a client
//! receives it, or the JSON-RPC error as carte's own [`RequestError`]. So what
//! the CLI prints is what a client receives, and no code outside `server/`
//! names an rmcp type (`tests/it/architecture.rs` checks it).
//!
//! Requests reach the snapshot through a [`View`] (in [`view`]): the
//! snapshot as one client sees it, every tool or one toolset's.

use rmcp::handler::server::skill_catalog::SkillCatalog;
use std::sync::Arc;
pub(in crate::server) use wire::{cache_scope, tool_result};
use wire::{content_block, resource_contents};

use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use rmcp::model::{
    CompleteResult, CompletionInfo, GetPromptResult, Implementation, Prompt, PromptMessage, Reference, Resource,
    ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig, Tool,
};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::catalog::{self, Catalog};
use crate::prompt::PromptError;
use crate::render::RenderError;
use crate::resource::ReadError;
use crate::run;
use crate::run::steps::{InputRequired, Resume, Stopped};
use crate::uri_template::{self, MAX_URI_BYTES};

mod view;
mod wire;

use view::Toolset;
pub use view::{ListKind, View, unknown_toolset};

/// The error code of a cancelled request's (normally dropped) response.
pub const REQUEST_CANCELLED: i32 = -32800;

/// How many items one page of a list holds.
pub const PAGE_SIZE: usize = 100;

/// A JSON-RPC error a request answers with, in carte's own type.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestError {
    /// The JSON-RPC error code, e.g. -32602 (invalid params).
    pub code: i32,
    /// What went wrong, for a person.
    pub message: String,
    /// Details for a program, e.g. `{"uri": …}`.
    pub data: Option<Value>,
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (JSON-RPC error {})", self.message, self.code)
    }
}

impl From<ErrorData> for RequestError {
    fn from(err: ErrorData) -> RequestError {
        RequestError { code: err.code.0, message: err.message.into_owned(), data: err.data }
    }
}

/// What a request answers: the result's JSON as a client on a session-based
/// protocol version receives it (no `resultType`), or the error.
pub type Answer = Result<Value, RequestError>;

/// An rmcp-typed answer as an [`Answer`].
fn answer(result: Result<impl Serialize, ErrorData>) -> Answer {
    let result = result.map_err(RequestError::from)?;
    let mut value = serde_json::to_value(result).map_err(|err| RequestError {
        code: ErrorCode::INTERNAL_ERROR.0,
        message: format!("internal: the result does not convert to JSON: {err}"),
        data: None,
    })?;
    if let Value::Object(map) = &mut value {
        map.remove("resultType");
    }
    Ok(value)
}

/// What a request that can ask the client gives: its result, or the
/// questions the client must answer first (a 2026-07-28 input-required
/// result), with where it resumes.
pub(in crate::server) enum Asked<T> {
    /// The result.
    Done(T),
    /// Open questions, and where the request resumes.
    Input(InputRequired),
}

impl<T> Asked<T> {
    /// The result, for a caller that cannot ask (the CLI's JSON face).
    fn done(self, name: &str) -> Result<T, ErrorData> {
        match self {
            Asked::Done(result) => Ok(result),
            Asked::Input(asked) => Err(ErrorData::internal_error(
                format!("`{name}` needs answers that only an MCP client can give ({} open)", asked.questions.len()),
                None,
            )),
        }
    }
}

/// The error response of a cancelled request.
fn cancelled() -> ErrorData {
    ErrorData::new(ErrorCode(REQUEST_CANCELLED), "request cancelled", None)
}

/// -32602 for a URI longer than [`MAX_URI_BYTES`], before any matching.
pub(in crate::server) fn check_uri_length(uri: &str) -> Result<(), ErrorData> {
    uri_template::check_length(uri).map_err(|err| {
        ErrorData::invalid_params(err.to_string(), Some(json!({ "length": err.len, "max": MAX_URI_BYTES })))
    })
}

/// Most completion values one answer carries (the MCP limit).
const MAX_COMPLETIONS: usize = 100;

/// A catalog and its MCP forms, built once.
pub struct Snapshot {
    /// The skills of the catalog's `skills:` folder, as read when this was built.
    pub(in crate::server) skills: Option<Arc<SkillCatalog>>,
    /// The catalog.
    pub catalog: Arc<Catalog>,
    /// What `initialize` answers (serverInfo, capabilities, instructions).
    pub(in crate::server) info: ServerConfig,
    /// Counts the catalogs this process has served: 1 at start, +1 per reload.
    pub generation: u64,
    /// A hash of everything the list methods return, as 16 hex digits.
    pub fingerprint: String,
    /// `_meta` of every list result: the generation and the fingerprint, so a
    /// client that ignores notifications can still tell its menu is stale.
    meta: rmcp::model::MetaObject,
    tools: Vec<Tool>,
    /// The tools whose `inputSchema` marks a property `x-mcp-header`, by
    /// name: what rmcp checks `Mcp-Param-*` headers against (SEP-2243).
    header_tools: std::collections::HashMap<String, Tool>,
    prompts: Vec<Prompt>,
    resources: Vec<Resource>,
    resource_templates: Vec<ResourceTemplate>,
    /// Whether a resource or resource template has `steps` (a read may ask the client).
    pub(in crate::server) resource_steps: bool,
    /// The catalog's toolsets by name: what each one's clients see.
    toolsets: std::collections::HashMap<String, Toolset>,
}

impl Snapshot {
    /// Builds the MCP forms of `catalog`, the first one served.
    pub fn new(catalog: Catalog) -> Snapshot {
        Snapshot::with_generation(catalog, 1)
    }

    /// Builds the MCP forms of `catalog`, served as `generation`.
    pub fn with_generation(catalog: Catalog, generation: u64) -> Snapshot {
        #[allow(deprecated)] // logging is deprecated by SEP-2577 but still part of every version carte serves
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .enable_tool_list_changed();
        // The tasks extension, when some tool may run as a task.
        let capabilities = if catalog.tools.iter().any(|tool| tool.task.is_some()) {
            capabilities.enable_tasks()
        } else {
            capabilities
        };
        // The skills extension, when the catalog has a skills folder (read whole, here).
        let skills = catalog.skills.as_ref().and_then(|folder| match SkillCatalog::from_dir(folder) {
            Ok(skills) => Some(Arc::new(skills)),
            Err(err) => {
                tracing::warn!("the skills in {} are not served: {err}", folder.display());
                None
            }
        });
        let capabilities =
            if skills.is_some() { capabilities.enable_skills_with_directory_read() } else { capabilities };
        let capabilities = capabilities.build();
        let server = &catalog.server;
        let mut implementation = Implementation::new(server.name.clone(), server.version.clone());
        if let Some(title) = &server.title {
            implementation = implementation.with_title(title.clone());
        }
        if let Some(description) = &server.description {
            implementation = implementation.with_description(description.clone());
        }
        if let Some(url) = &server.website_url {
            implementation = implementation.with_website_url(url.clone());
        }
        implementation.icons = server.icons.clone().and_then(|icons| serde_json::from_value(icons).ok());
        let mut info = ServerConfig::new(capabilities).with_server_info(implementation);
        if let Some(instructions) = &server.instructions {
            info = info.with_instructions(instructions.clone());
        }
        let mut tools: Vec<Tool> = catalog.tools.iter().filter_map(|t| item(&t.wire)).collect();
        // `discovery: search`: carte's `find_tools` comes first.
        let search = catalog.server.search;
        if search && let Some(find) = crate::server::handler::find_tools_definition(catalog.tools.len()) {
            tools.insert(0, find);
        }
        let header_tools = tools
            .iter()
            .filter(|tool| marks_header(&tool.input_schema))
            .map(|tool| (tool.name.to_string(), tool.clone()))
            .collect();
        let prompts = catalog.prompts.iter().filter_map(|p| item(&p.wire)).collect();
        let resources = catalog.resources.iter().filter_map(|r| item(&r.wire)).collect();
        let resource_templates = catalog.resource_templates.iter().filter_map(|t| item(&t.wire)).collect();
        let toolsets = catalog
            .toolsets
            .iter()
            .map(|(name, members)| {
                let names: std::collections::HashSet<String> = members.iter().cloned().collect();
                let tools = tools
                    .iter()
                    .filter(|tool| names.contains(&*tool.name) || (search && tool.name == crate::catalog::FIND_TOOLS))
                    .cloned()
                    .collect();
                (name.clone(), Toolset { tools, names, meta: rmcp::model::MetaObject::default() })
            })
            .collect();
        let resource_steps = catalog.resources.iter().any(|r| !r.steps.is_empty())
            || catalog.resource_templates.iter().any(|t| !t.steps.is_empty());
        let mut snapshot = Snapshot {
            skills,
            resource_steps,
            catalog: Arc::new(catalog),
            info,
            generation,
            fingerprint: String::new(),
            meta: rmcp::model::MetaObject::default(),
            tools,
            header_tools,
            prompts,
            resources,
            resource_templates,
            toolsets,
        };
        snapshot.fingerprint = snapshot.compute_fingerprint();
        let mut meta = Map::new();
        meta.insert("carte/generation".to_owned(), json!(generation));
        meta.insert("carte/fingerprint".to_owned(), json!(snapshot.fingerprint));
        snapshot.meta = rmcp::model::MetaObject(meta.clone());
        // A toolset's clients get the fingerprint of the lists they see.
        let fingerprints: Vec<(String, String)> = snapshot
            .toolsets
            .iter()
            .map(|(name, toolset)| (name.clone(), snapshot.fingerprint_with(&toolset.tools)))
            .collect();
        for (name, fingerprint) in fingerprints {
            if let Some(toolset) = snapshot.toolsets.get_mut(&name) {
                meta.insert("carte/fingerprint".to_owned(), json!(fingerprint));
                toolset.meta = rmcp::model::MetaObject(meta.clone());
            }
        }
        snapshot
    }

    /// FNV-1a over the JSON of every list: stable across runs and machines.
    fn compute_fingerprint(&self) -> String {
        self.fingerprint_with(&self.tools)
    }

    /// [`Snapshot::compute_fingerprint`] with `tools` as the tools' list.
    fn fingerprint_with(&self, tools: &[Tool]) -> String {
        let mut hasher = Fnv(0xcbf2_9ce4_8422_2325);
        let _ = serde_json::to_writer(&mut hasher, tools);
        let _ = serde_json::to_writer(&mut hasher, &self.prompts);
        let _ = serde_json::to_writer(&mut hasher, &self.resources);
        let _ = serde_json::to_writer(&mut hasher, &self.resource_templates);
        format!("{:016x}", hasher.0)
    }

    /// `prompts/get` as JSON: an unknown prompt or a missing required argument
    /// is -32602, a message that fails to render -32603.
    pub async fn get_prompt_json(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        client: &dyn run::steps::Client,
    ) -> Answer {
        answer(self.get_prompt(name, arguments, client, Resume::default()).await.and_then(|asked| asked.done(name)))
    }

    /// `prompts/get` from `resume`: its steps, then its messages, which
    /// render on the blocking pool.
    pub(in crate::server) async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        client: &dyn run::steps::Client,
        resume: Resume,
    ) -> Result<Asked<GetPromptResult>, ErrorData> {
        let Some(prompt) = self.catalog.prompt(name) else {
            return Err(ErrorData::invalid_params(format!("unknown prompt `{name}`"), Some(json!({ "name": name }))));
        };
        let arguments = arguments.unwrap_or_default();
        // A value outside an argument's `complete:` list is the likeliest
        // reason a template failed: the caller's mistake (-32602), named.
        let outside = prompt.arguments.iter().find_map(|argument| {
            let given = arguments.get(&argument.name)?.as_str()?;
            (!argument.complete.is_empty() && !argument.complete.iter().any(|value| value == given))
                .then(|| (argument.name.clone(), given.to_owned(), argument.complete.join(", ")))
        });
        let prompt_error = |err| match err {
            PromptError::MissingArgument(argument) => ErrorData::invalid_params(
                format!("prompt `{name}` needs argument `{argument}`"),
                Some(json!({ "argument": argument })),
            ),
            PromptError::Block(err) => match &outside {
                Some((argument, given, values)) => ErrorData::invalid_params(
                    format!(
                        "prompt `{name}` failed to render with argument `{argument}` = `{given}`, which is not one of its values ({values}): {err}"
                    ),
                    Some(json!({ "argument": argument })),
                ),
                None => ErrorData::internal_error(format!("prompt `{name}` failed to render: {err}"), None),
            },
        };
        let mut context =
            crate::prompt::context(&self.catalog, prompt, &arguments, client.caller()).map_err(prompt_error)?;
        if !prompt.steps.is_empty() {
            let what = format!("prompt `{name}`");
            let owner = run::steps::Owner { catalog: &self.catalog, what: &what };
            match run::steps::run(owner, &prompt.steps, &mut context, client, resume, None).await {
                Ok(_) => {}
                Err(Stopped::Cancelled) => return Err(cancelled()),
                Err(Stopped::Failed(message)) => return Err(ErrorData::internal_error(message, None)),
                Err(Stopped::InputRequired(asked)) => return Ok(Asked::Input(asked)),
            }
        }
        let context = crate::render::scope(context);
        let rendered = match crate::render::inline(|| crate::prompt::render(&self.catalog, prompt, &context)) {
            Some(rendered) => rendered,
            None => {
                let (catalog, owned_name) = (Arc::clone(&self.catalog), name.to_owned());
                crate::render::pooled(client.render_caller(), move || match catalog.prompt(&owned_name) {
                    Some(prompt) => crate::prompt::render(&catalog, prompt, &context),
                    None => Err(PromptError::Block(RenderError::Template("the prompt is gone".to_owned()).into())),
                })
                .await
                .unwrap_or_else(|err| Err(PromptError::Block(err.into())))
            }
        };
        let messages = rendered.map_err(prompt_error)?;
        let messages = messages
            .into_iter()
            .map(|(role, output)| {
                let role = match role {
                    catalog::Role::User => Role::User,
                    catalog::Role::Assistant => Role::Assistant,
                };
                PromptMessage::new(role, content_block(output))
            })
            .collect();
        let mut result = GetPromptResult::new(messages);
        if let Some(description) = prompt.wire.get("description").and_then(Value::as_str) {
            result = result.with_description(description);
        }
        Ok(Asked::Done(result))
    }

    /// `resources/read` for a request, from `resume`: its steps, then
    /// matching and rendering (inline first, then in `client`'s turn of the
    /// render pool: see [`crate::resource::read_found`]), a resource's
    /// effect (a statement through its database, a request, a program);
    /// nothing slow holds a runtime thread.
    pub(in crate::server) async fn read_resource_for(
        &self,
        uri: &str,
        client: &dyn run::steps::Client,
        resume: Resume,
    ) -> Result<Asked<rmcp::model::ReadResourceResult>, ErrorData> {
        check_uri_length(uri)?;
        if let Some(read) = self.read_skill(uri) {
            return read.map(Asked::Done);
        }
        let caller = || client.render_caller();
        let found = self.find(uri, &caller).await;
        let found = found.map_err(|err| read_error(uri, err.into()))?.map_err(|err| read_error(uri, err))?;
        let mut context = crate::resource::base_context(&self.catalog, uri, &found);
        let steps = found.steps(&self.catalog);
        if !steps.is_empty() {
            let what = format!("resource `{uri}`");
            let owner = run::steps::Owner { catalog: &self.catalog, what: &what };
            match run::steps::run(owner, steps, &mut context, client, resume, None).await {
                Ok(_) => {}
                Err(Stopped::Cancelled) => return Err(cancelled()),
                Err(Stopped::Failed(message)) => return Err(ErrorData::internal_error(message, None)),
                Err(Stopped::InputRequired(asked)) => return Ok(Asked::Input(asked)),
            }
        }
        let call = run::resource_call(&self.catalog, &context, client);
        let cache = found.cache(&self.catalog);
        let body = crate::resource::read_found(&self.catalog, (uri, found), context, &call, &caller).await;
        let body = body.map_err(|err| read_error(uri, err))?;
        let mut result = rmcp::model::ReadResourceResult::new(vec![resource_contents(body)]);
        if let Some(cache) = cache {
            result = result.with_ttl_ms(cache.ttl_ms).with_cache_scope(cache_scope(cache.scope));
        }
        Ok(Asked::Done(result))
    }

    /// A `skill://` URI's file, when the catalog has skills (`None`: not a skill's URI).
    fn read_skill(&self, uri: &str) -> Option<Result<rmcp::model::ReadResourceResult, ErrorData>> {
        let skills = self.skills.as_ref().filter(|_| uri.starts_with("skill://"))?;
        Some(skills.read_resource(uri).ok_or_else(|| {
            ErrorData::resource_not_found(format!("no skill file `{uri}`"), Some(json!({ "uri": uri })))
        }))
    }

    /// What `uri` names (see [`crate::resource::find`], which renders a
    /// resource template's `fail()` checks): inline first, then in
    /// `caller`'s turn of the render pool.
    async fn find(
        &self,
        uri: &str,
        caller: &(dyn Fn() -> crate::render::Caller + Sync),
    ) -> Result<Result<crate::resource::Found, crate::resource::ReadError>, RenderError> {
        if let Some(found) = crate::render::inline(|| crate::resource::find(&self.catalog, uri)) {
            return Ok(found);
        }
        let (catalog, uri) = (Arc::clone(&self.catalog), uri.to_owned());
        crate::render::pooled(caller(), move || crate::resource::find(&catalog, &uri)).await
    }

    /// The steps a read of `uri` runs (none for an unknown URI).
    pub(in crate::server) async fn steps_of(
        &self,
        uri: &str,
        caller: &(dyn Fn() -> crate::render::Caller + Sync),
    ) -> Vec<catalog::Step> {
        match self.find(uri, caller).await {
            Ok(Ok(found)) => found.steps(&self.catalog).to_vec(),
            _ => Vec::new(),
        }
    }

    /// `resources/read` as JSON, running the statement of a resource that
    /// reads a database (as `carte read` and live resources read).
    pub async fn read_resource_live_json(&self, uri: &str) -> Answer {
        self.read_resource_with(uri, &run::steps::NoClient::default()).await
    }

    /// `resources/read` as JSON on behalf of `client` (as an example reads).
    pub async fn read_resource_with(&self, uri: &str, client: &dyn run::steps::Client) -> Answer {
        let contents = self.read_resource_for(uri, client, Resume::default()).await;
        answer(contents.and_then(|asked| asked.done(uri)).map(|result| json!({ "contents": result.contents })))
    }

    /// `resources/read` as JSON (`{"contents": [...]}`), blocking: an unknown
    /// URI, or one a resource template rejects with `fail()`, is -32002 with
    /// `data.uri` (rmcp makes it -32602 for 2026-07-28 clients); a URI over
    /// [`MAX_URI_BYTES`] is -32602.
    pub fn read_resource_json(&self, uri: &str) -> Answer {
        if let Some(read) = self.read_skill(uri) {
            return answer(read.map(|result| json!({ "contents": result.contents })));
        }
        answer(read(&self.catalog, uri).map(|contents| json!({ "contents": contents })))
    }

    /// `completion/complete` for a prompt's argument, as JSON (as `carte complete` asks).
    pub fn complete_prompt(&self, name: &str, argument: &str, typed: &str) -> Answer {
        answer(self.complete(&Reference::for_prompt(name), argument, typed))
    }

    /// `completion/complete` for a resource template's variable, as JSON (as `carte complete` asks).
    pub fn complete_resource(&self, uri: &str, argument: &str, typed: &str) -> Answer {
        answer(self.complete(&Reference::for_resource(uri), argument, typed))
    }

    /// `completion/complete`: values from `complete:` lists that start with
    /// what was typed.
    pub(in crate::server) fn complete(
        &self,
        reference: &Reference,
        argument: &str,
        typed: &str,
    ) -> Result<CompleteResult, ErrorData> {
        let values: &[String] = if let Some(name) = reference.as_prompt_name() {
            let prompt = self
                .catalog
                .prompt(name)
                .ok_or_else(|| ErrorData::invalid_params(format!("unknown prompt `{name}`"), None))?;
            prompt.arguments.iter().find(|a| a.name == argument).map_or(&[], |a| a.complete.as_slice())
        } else if let Some(uri) = reference.as_resource_uri() {
            let template = self
                .catalog
                .resource_template(uri)
                .ok_or_else(|| ErrorData::invalid_params(format!("unknown resource template `{uri}`"), None))?;
            template.complete.get(argument).map_or(&[], Vec::as_slice)
        } else {
            return Err(ErrorData::invalid_params("unsupported completion reference", None));
        };
        let typed_lower = typed.to_lowercase();
        let matching: Vec<&String> = values.iter().filter(|v| v.to_lowercase().starts_with(&typed_lower)).collect();
        let total = matching.len();
        let shown: Vec<String> = matching.into_iter().take(MAX_COMPLETIONS).cloned().collect();
        let has_more = total > shown.len();
        let info = CompletionInfo::with_pagination(shown, Some(u32::try_from(total).unwrap_or(u32::MAX)), has_more)
            .map_err(|err| ErrorData::internal_error(err, None))?;
        Ok(CompleteResult::new(info))
    }
}

fn read(catalog: &Catalog, uri: &str) -> Result<Vec<ResourceContents>, ErrorData> {
    check_uri_length(uri)?;
    crate::resource::read(catalog, uri).map(|body| vec![resource_contents(body)]).map_err(|err| read_error(uri, err))
}

fn read_error(uri: &str, err: ReadError) -> ErrorData {
    match err {
        ReadError::NotFound => {
            ErrorData::resource_not_found(format!("resource not found: {uri}"), Some(json!({ "uri": uri })))
        }
        ReadError::Rejected(message) => ErrorData::resource_not_found(
            format!("resource not found: {uri}: {message}"),
            Some(json!({ "uri": uri, "reason": message })),
        ),
        ReadError::Render(err) => ErrorData::internal_error(format!("resource `{uri}` failed to render: {err}"), None),
        err @ ReadError::Effect { .. } => {
            ErrorData::internal_error(format!("resource `{uri}` could not be read: {err}"), None)
        }
        err @ (ReadError::Live(_) | ReadError::Steps) => {
            ErrorData::internal_error(format!("resource `{uri}` could not be read here: {err}"), None)
        }
    }
}

/// FNV-1a as a writer, so a list is hashed as it is serialized.
struct Fnv(u64);

impl std::io::Write for Fnv {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn item<T: serde::de::DeserializeOwned>(wire: &Map<String, Value>) -> Option<T> {
    match serde_json::from_value(Value::Object(wire.clone())) {
        Ok(item) => Some(item),
        Err(err) => {
            tracing::error!("internal: a catalog entry does not convert to MCP: {err}");
            None
        }
    }
}

/// Whether a property reached through `properties` from the top of `schema`
/// carries `x-mcp-header` (the only place the catalog allows it).
fn marks_header(schema: &Map<String, Value>) -> bool {
    schema.get("properties").and_then(Value::as_object).is_some_and(|properties| {
        properties.values().filter_map(Value::as_object).any(|p| p.contains_key("x-mcp-header") || marks_header(p))
    })
}
