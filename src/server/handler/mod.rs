//! The rmcp `ServerHandler` of one client session: each MCP method takes the
//! current snapshot and answers from it.
//!
//! A request takes its view of the snapshot once (`Handler::view`) and answers
//! from that one only, so a reload mid-request never mixes two catalogs.
//!
//! - `call.rs`: how a request that runs steps starts (its `requestState`
//!   opened, the capabilities it needs) and ends (input required), who owns
//!   a task, and a tool call from its arguments to its result or task;
//! - [`observed`]: what every request goes through (its trace span, its metrics);
//! - [`request_client`]: the client of one request as a tool's steps see it.
#![allow(deprecated)] // MCP logging/subscribe are deprecated by SEP-2577 but part of every version carte serves

pub(in crate::server) mod call;
mod discovery;
pub(crate) use discovery::find_tools_definition;
mod observed;
mod request_client;

use request_client::RequestClient;

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CustomRequest, CustomResult,
    GetPromptRequestParams, GetPromptResponse, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::http::oauth::Caller;
use super::hub::{MAX_SUBSCRIPTIONS, Session, SubscribeError, severity};
use super::request_state::Binding;
use super::snapshot::{Asked, View};
use super::trace::Target;
use super::{Shared, tasks};
use crate::catalog::Step;
use crate::catalog::model::TaskMode;
use crate::run::steps::{InputRequired, Resume};
use crate::{metrics, run};
use rmcp::model::{
    CancelTaskParams, ClientCapabilities, GetTaskParams, GetTaskResult, InputRequest, InputRequests,
    InputRequiredResult, InputResponses, UpdateTaskParams,
};

/// MCP methods rmcp parses itself: if one reaches `on_custom_request`, its
/// parameters did not fit, which is -32602, not "method not found".
pub(crate) const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// Methods protocol 2026-07-28 removed: -32601 (HTTP 404) for its clients.
const REMOVED_IN_2026: &[&str] = &["initialize", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];

/// One client session.
pub struct Handler {
    shared: Arc<Shared>,
    session: Arc<Session>,
    /// Cancelled when the client's input ends (stdio: end of stdin), which
    /// ends its listen streams: nobody is left to cancel them.
    input_closed: CancellationToken,
    /// When the handler was made: a session's start.
    opened: Instant,
    /// Set by a request of a legacy session, or any over stdio: this
    /// handler is a session whose duration is recorded when it ends (HTTP
    /// 2026-07-28 requests are not sessions).
    session_labels: std::sync::OnceLock<metrics::Session>,
    /// The tools this session found with `find_tools` (`discovery: search`).
    discovered: discovery::Discovered,
}

impl Handler {
    /// A handler for a new session.
    pub fn new(shared: Arc<Shared>) -> Handler {
        Handler::until_closed(shared, CancellationToken::new())
    }

    /// A handler for a new session whose listen streams also end when
    /// `input_closed` is cancelled.
    pub fn until_closed(shared: Arc<Shared>, input_closed: CancellationToken) -> Handler {
        Handler::of_toolset(shared, None, input_closed)
    }

    /// A handler for a new session of `toolset`'s clients (`None`: every
    /// tool) whose listen streams also end when `input_closed` is cancelled.
    pub fn of_toolset(shared: Arc<Shared>, toolset: Option<Arc<str>>, input_closed: CancellationToken) -> Handler {
        let session = shared.hub.new_session_in(toolset);
        Handler {
            shared,
            session,
            input_closed,
            opened: Instant::now(),
            session_labels: std::sync::OnceLock::new(),
            discovered: discovery::Discovered::default(),
        }
    }

    /// The current snapshot as this session sees it: the one place every
    /// request gets its tools from, restricted to the session's toolset.
    /// A toolset the catalog no longer has is -32600, naming those it has.
    fn view(&self) -> Result<View, ErrorData> {
        View::of(self.shared.snapshot(), self.session.toolset.as_ref())
            .map_err(|err| ErrorData::new(rmcp::model::ErrorCode(err.code), err.message, err.data))
    }

    /// Sends a log message about this request, before its response, if the
    /// client wants it: on 2026-07-28 the request's own `logLevel` (none: no
    /// messages), else the session's level. `data` is built only if sent.
    async fn log(
        &self,
        context: &RequestContext<RoleServer>,
        level: LoggingLevel,
        logger: &str,
        data: impl FnOnce() -> serde_json::Value,
    ) {
        let modern = modern(context);
        let wanted = match context.meta.log_level() {
            Some(wanted) => wanted,
            None if modern => return,
            None => self.session.level(),
        };
        if severity(level) >= severity(wanted) {
            let param = rmcp::model::LoggingMessageNotificationParam::new(level, data()).with_logger(logger);
            let _ = context.peer.notify_logging_message(param).await;
        }
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        self.shared.hub.leave(self.session.id);
        if let Some(labels) = self.session_labels.get() {
            metrics::session(labels, self.opened.elapsed());
        }
    }
}

/// The caller a verified OAuth access token names (HTTP with `--oauth-issuer`).
fn caller(context: &RequestContext<RoleServer>) -> Option<&Caller> {
    context.extensions.get::<axum::http::request::Parts>()?.extensions.get::<Caller>()
}

/// -32600 for a call of `tool` by a caller that lacks some of its scopes
/// (the HTTP layer answers such a call 403 before it gets here).
fn check_scopes(context: &RequestContext<RoleServer>, tool: &crate::catalog::Tool) -> Result<(), ErrorData> {
    let Some(caller) = caller(context) else { return Ok(()) };
    let missing = caller.missing(&tool.scopes);
    if missing.is_empty() {
        return Ok(());
    }
    Err(super::http::oauth::insufficient_scope_error(&tool.name, &tool.scopes, &missing))
}

/// Whether the request came from a 2026-07-28 (stateless) client.
pub(super) fn modern(context: &RequestContext<RoleServer>) -> bool {
    context.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// -32601 for a legacy method a 2026-07-28 client called (removed from that version).
fn removed(method: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("`{method}` is not part of protocol 2026-07-28"),
        Some(json!({ "method": method })),
    )
}

impl Handler {
    /// The current catalog's skills, or -32602 for `uri` when it has none.
    fn skills(&self, uri: &str) -> Result<Arc<rmcp::handler::server::skill_catalog::SkillCatalog>, ErrorData> {
        let skills = self.shared.snapshot().skills.clone();
        skills.ok_or_else(|| ErrorData::invalid_params(format!("no skill at `{uri}`: this server has no skills"), None))
    }
}

fn cursor(request: Option<PaginatedRequestParams>) -> Option<String> {
    request.and_then(|params| params.cursor)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        self.shared.snapshot().info.clone()
    }

    /// `skills/list` (the skills extension): the catalog's `skills:` folder.
    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListSkillsResult, ErrorData> {
        self.observed(&context, "skills/list", Target::None, async {
            Ok(self.shared.snapshot().skills.as_ref().map(|skills| skills.list_skills()).unwrap_or_default())
        })
        .await
    }

    /// `skills/get`: one skill's manifest.
    async fn get_skill(
        &self,
        request: rmcp::model::GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetSkillResult, ErrorData> {
        self.observed(&context, "skills/get", Target::Resource(&request.uri), async {
            self.skills(&request.uri)?.get_skill(&request.uri)
        })
        .await
    }

    /// `resources/directory/read`: a skill folder's entries.
    async fn read_resource_directory(
        &self,
        request: rmcp::model::ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceDirectoryResult, ErrorData> {
        self.observed(&context, "resources/directory/read", Target::Resource(&request.uri), async {
            self.skills(&request.uri)?.read_resource_directory(&request.uri)
        })
        .await
    }

    /// `server/discover`, with how long clients may keep it (`server.cache`).
    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        let snapshot = self.shared.snapshot();
        let versions = self.supported_protocol_versions().into_owned();
        let mut result = rmcp::model::DiscoverResult::from_server_info(versions, snapshot.info.clone());
        if let Some(cache) = snapshot.catalog.server.cache {
            result =
                result.with_ttl_ms(cache.ttl_ms).with_cache_scope(crate::server::snapshot::cache_scope(cache.scope));
        }
        Ok(result)
    }

    /// A tool whose arguments travel in `Mcp-Param-*` headers too: rmcp's
    /// HTTP transport then checks each header against the body (SEP-2243:
    /// 400 and -32020 when they differ). `None` for every other tool: there
    /// is nothing to check.
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.view().ok()?.header_tool(name).cloned()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.observed(&context, "initialize", Target::None, async {
            if modern(&context) {
                return Err(removed("initialize"));
            }
            context.peer.set_peer_info(request.clone());
            self.shared.hub.join(&self.session, context.peer.clone());
            self.negotiate_initialize(&request)
        })
        .await
    }

    /// The tools of the session's view; with OAuth, only those whose
    /// scopes the caller's token grants.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.observed(&context, "tools/list", Target::None, async {
            let view = self.view()?;
            let search = view.catalog.server.search;
            match caller(&context) {
                None if !search => view.list(cursor(request).as_deref()),
                caller => {
                    let discovered = crate::sync::lock(&self.discovered);
                    view.list_tools_where(cursor(request).as_deref(), |tool| {
                        caller.is_none_or(|caller| caller.missing(&tool.scopes).is_empty())
                            && (!search || tool.pinned || discovered.contains(&tool.name))
                    })
                }
            }
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let observed = ("tools/call", Target::Tool(&request.name), request.arguments.as_ref());
        self.observed_with(&context, observed, self.run_tool(&request, &context)).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.observed(&context, "tasks/get", Target::None, async {
            Ok(GetTaskResult::new(self.shared.tasks.get(&self.owner(&context), &request.task_id).await?))
        })
        .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.observed(&context, "tasks/update", Target::None, async {
            let answers = request.input_responses.into_iter().collect();
            self.shared.tasks.update(&self.owner(&context), &request.task_id, answers).await
        })
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.observed(&context, "tasks/cancel", Target::None, async {
            self.shared.tasks.cancel(&self.owner(&context), &request.task_id).await
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.observed(&context, "prompts/list", Target::None, async { self.view()?.list(cursor(request).as_deref()) })
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let observed = ("prompts/get", Target::Prompt(&request.name), request.arguments.as_ref());
        self.observed_with(&context, observed, async {
            let snapshot = self.view()?;
            let binding = Binding { method: "prompts/get", name: &request.name, arguments: request.arguments.as_ref() };
            let steps =
                snapshot.catalog.prompt(&request.name).map(|prompt| prompt.steps.as_slice()).unwrap_or_default();
            let (resume, answers) = self.prepare(
                &context,
                &binding,
                request.request_state.as_deref(),
                request.input_responses.clone(),
                steps,
            )?;
            let client = RequestClient { handler: self, context: &context, answers };
            match snapshot.get_prompt(&request.name, request.arguments.clone(), &client, resume).await? {
                Asked::Done(result) => Ok(result.into()),
                Asked::Input(asked) => Ok(self.input_required(&binding, asked)?.into()),
            }
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.observed(&context, "resources/list", Target::None, async { self.view()?.list(cursor(request).as_deref()) })
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.observed(&context, "resources/templates/list", Target::None, async {
            self.view()?.list(cursor(request).as_deref())
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.observed(&context, "resources/read", Target::Resource(&request.uri), async {
            let snapshot = self.view()?;
            let binding = Binding { method: "resources/read", name: &request.uri, arguments: None };
            // Matching a URI may render (a template's `fail()` checks); only a catalog whose resources ask needs it here.
            let steps = if snapshot.resource_steps && modern(&context) {
                super::snapshot::check_uri_length(&request.uri)?;
                snapshot.steps_of(&request.uri, &|| crate::render::Caller::new(self.owner(&context))).await
            } else {
                Vec::new()
            };
            let (resume, answers) = self.prepare(
                &context,
                &binding,
                request.request_state.as_deref(),
                request.input_responses.clone(),
                &steps,
            )?;
            let client = RequestClient { handler: self, context: &context, answers };
            match snapshot.read_resource_for(&request.uri, &client, resume).await? {
                Asked::Done(result) => Ok(result.into()),
                Asked::Input(asked) => Ok(self.input_required(&binding, asked)?.into()),
            }
        })
        .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.observed(&context, "resources/subscribe", Target::None, async {
            if modern(&context) {
                return Err(removed("resources/subscribe"));
            }
            known_resource(&*self.view()?, &request.uri)?;
            self.shared.hub.subscribe(&self.session, &request.uri).map_err(|err| match err {
                SubscribeError::TooMany => {
                    ErrorData::invalid_params(err.to_string(), Some(json!({ "limit": MAX_SUBSCRIPTIONS })))
                }
                SubscribeError::NotJoined => ErrorData::invalid_request(err.to_string(), None),
            })?;
            // What the subscriber starts from, for a resource that reads a database.
            crate::live::subscribed(&*self.shared, [request.uri]).await;
            Ok(())
        })
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.observed(&context, "resources/unsubscribe", Target::None, async {
            if modern(&context) {
                return Err(removed("resources/unsubscribe"));
            }
            self.shared.hub.unsubscribe(&self.session, &request.uri);
            Ok(())
        })
        .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.observed(&context, "completion/complete", Target::None, async {
            self.view()?.complete(&request.r#ref, &request.argument.name, &request.argument.value)
        })
        .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.observed(&context, "logging/setLevel", Target::None, async {
            if modern(&context) {
                return Err(removed("logging/setLevel"));
            }
            self.session.set_level(request.level);
            Ok(())
        })
        .await
    }

    /// Accepts a valid filter as requested; for an invalid one, accepts
    /// nothing, and [`Handler::listen`] answers the error. (rmcp acknowledges
    /// a stream before `listen` runs and has no way to refuse it here but
    /// -32601; and it intersects filters pairwise, so a filter over the cap
    /// must not reach it whole.)
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        match check_listen_filter(&self.shared.snapshot(), requested) {
            Ok(_) => Some(requested.clone()),
            Err(_) => Some(SubscriptionFilter::default()),
        }
    }

    /// A 2026-07-28 listen stream: in the hub until the client cancels it.
    /// A filter naming more than [`MAX_SUBSCRIPTIONS`] resources, or one that
    /// is not a resource of the catalog, is refused with -32602.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        check_listen_filter(&*self.view()?, context.requested())?;
        let accepted: std::collections::HashSet<String> =
            context.accepted().resource_subscriptions.iter().flatten().cloned().collect();
        let _membership =
            self.shared.hub.listen(context.sink().clone(), accepted.clone(), self.session.toolset.clone());
        // What the stream starts from, for the resources it names that read a database.
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move { crate::live::subscribed(&*shared, accepted).await });
        tokio::select! {
            () = context.cancelled() => {}
            () = self.input_closed.cancelled() => {}
        }
        // The client cancelled the stream, closed it or went away: all normal.
        tracing::debug!("a listen stream closed");
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let version_2026 = modern(&context)
            || request.params.as_ref().and_then(|p| p.pointer("/_meta/io.modelcontextprotocol~1protocolVersion"))
                == Some(&json!("2026-07-28"));
        if version_2026 && REMOVED_IN_2026.contains(&request.method.as_str()) {
            return Err(removed(&request.method));
        }
        if KNOWN_METHODS.contains(&request.method.as_str()) {
            Err(ErrorData::invalid_params(
                format!("invalid parameters for `{}`", request.method),
                Some(json!({ "method": request.method })),
            ))
        } else {
            Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {}", request.method),
                None,
            ))
        }
    }
}

/// Ok if `uri` is short enough (-32602) and is a resource of `snapshot` or matches one of its templates;
/// else "resource not found" (-32002 with `data.uri`; rmcp makes it -32602
/// for 2026-07-28 clients).
fn known_resource(snapshot: &super::Snapshot, uri: &str) -> Result<(), ErrorData> {
    super::snapshot::check_uri_length(uri)?;
    if snapshot.catalog.resource(uri).is_some() || snapshot.catalog.match_template(uri).is_some() {
        return Ok(());
    }
    Err(ErrorData::resource_not_found(format!("resource not found: {uri}"), Some(json!({ "uri": uri }))))
}

/// Checks the resources a listen filter names: at most [`MAX_SUBSCRIPTIONS`]
/// (-32602 beyond), each one known.
fn check_listen_filter(snapshot: &super::Snapshot, filter: &SubscriptionFilter) -> Result<(), ErrorData> {
    let uris = filter.resource_subscriptions.as_deref().unwrap_or_default();
    if uris.len() > MAX_SUBSCRIPTIONS {
        return Err(ErrorData::invalid_params(
            format!(
                "a listen filter may name at most {MAX_SUBSCRIPTIONS} resources in `resourceSubscriptions` (it names {})",
                uris.len()
            ),
            Some(json!({ "limit": MAX_SUBSCRIPTIONS, "count": uris.len() })),
        ));
    }
    uris.iter().try_for_each(|uri| known_resource(snapshot, uri))
}
