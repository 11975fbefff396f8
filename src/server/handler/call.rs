//! A request that runs a tool or steps: where it resumes and what it needs
//! of the client ([`Handler::prepare`]), the input-required answer that
//! pauses it, who owns its task, and a tool call from its arguments to its
//! result or task ([`Handler::run_tool`]).

use super::*;
use crate::server::capabilities::has_capability;

impl Handler {
    /// Before a request that may ask the client runs anything: on
    /// 2026-07-28, where it resumes (its `requestState` opened: -32602 if it
    /// is not one this server signed for this very request) and the answers
    /// it carries; then -32021 if a step it will run needs a capability the
    /// request did not declare (an `optional` step is skipped instead).
    /// Legacy sessions start at the first step and are asked directly.
    pub(super) fn prepare(
        &self,
        context: &RequestContext<RoleServer>,
        binding: &Binding<'_>,
        state: Option<&str>,
        responses: Option<InputResponses>,
        steps: &[Step],
    ) -> Result<(Resume, Option<InputResponses>), ErrorData> {
        if !modern(context) {
            return Ok((Resume::default(), None));
        }
        let resume = match state {
            Some(state) => self.shared.state_keys.open(binding, state)?,
            None => Resume::default(),
        };
        let declared = context.meta.client_capabilities().unwrap_or_default();
        let mut missing = serde_json::Map::new();
        for input in run::steps::needed(steps, &resume) {
            let capability = input.kind.capability();
            if !has_capability(&declared, capability) {
                match capability.split_once('.') {
                    // `elicitation.url`: `{"elicitation": {"url": {}}}`.
                    Some((outer, inner)) => missing.insert(outer.to_owned(), json!({ inner: {} })),
                    None => missing.insert(capability.to_owned(), json!({})),
                };
            }
        }
        if !missing.is_empty() {
            let required = serde_json::from_value(serde_json::Value::Object(missing))
                .map_err(|err| ErrorData::internal_error(format!("internal: capabilities: {err}"), None))?;
            return Err(ErrorData::missing_required_client_capability(required));
        }
        Ok((resume, Some(responses.unwrap_or_default())))
    }

    /// The input-required result asking `asked`'s questions, with a new
    /// signed state that resumes where it says.
    pub(super) fn input_required(
        &self,
        binding: &Binding<'_>,
        asked: InputRequired,
    ) -> Result<InputRequiredResult, ErrorData> {
        let InputRequired { questions, resume } = asked;
        let mut requests = InputRequests::new();
        for question in questions {
            let wire = json!({ "method": question.method, "params": question.params });
            let request: InputRequest = serde_json::from_value(wire).map_err(|err| {
                ErrorData::internal_error(
                    format!("internal: `{}` is not a valid {}: {err}", question.key, question.method),
                    None,
                )
            })?;
            requests.insert(question.key, request);
        }
        let state = self.shared.state_keys.seal(binding, &resume)?;
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// Who owns the tasks this request creates and may see: a legacy
    /// session (over HTTP its `Mcp-Session-Id`, the same on every replica);
    /// on 2026-07-28, over HTTP the OAuth token's issuer and subject, or the
    /// bearer token (its SHA-256; all callers alike without one), on stdio
    /// the process.
    pub(super) fn owner(&self, context: &RequestContext<RoleServer>) -> String {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let modern = modern(context);
        match parts.and_then(|parts| http_owner(modern, &parts.headers, caller(context))) {
            Some(owner) => owner,
            None if modern => "stdio".to_owned(),
            None => format!("session:local:{}", self.session.id),
        }
    }

    /// Counts a call of `tool` against the catalog's `rateLimit`s for this
    /// request's caller ([`Handler::owner`]), unless the HTTP layer already
    /// did ([`RateCounted`]); past a limit, -32000 with `retryAfterMs`.
    fn count_call(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &crate::catalog::Tool,
        server: Option<crate::catalog::rate_limit::RateLimit>,
    ) -> Result<(), ErrorData> {
        if server.is_none() && tool.rate_limit.is_none() {
            return Ok(());
        }
        let parts = context.extensions.get::<axum::http::request::Parts>();
        if parts.is_some_and(|parts| parts.extensions.get::<RateCounted>().is_some()) {
            return Ok(());
        }
        let caller = self.owner(context);
        let own = (tool.name.as_str(), tool.rate_limit);
        self.shared.limiter.take(&caller, own, server, std::time::Instant::now()).map_err(rate_limited)
    }

    /// `tools/call`: the tool's steps, effect and result, as a task when
    /// the tool and the client ask for one.
    pub(super) async fn run_tool(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The rarer ways (search, tasks) are boxed where they are taken: every
        // call's future is as large as its largest way.
        let _in_flight = self.shared.calls.start();
        let snapshot = self.view()?;
        if snapshot.catalog.server.search && request.name == crate::catalog::FIND_TOOLS {
            return Box::pin(self.find_tools(request, context)).await;
        }
        let started = Instant::now();
        let binding = Binding { method: "tools/call", name: &request.name, arguments: request.arguments.as_ref() };
        // Looked up once; `call_tool` answers for a tool the view lacks.
        let found = snapshot.tool(&request.name);
        if let Some(tool) = found {
            check_scopes(context, tool)?;
            self.count_call(context, tool, snapshot.catalog.server.rate_limit)?;
        }
        let steps = found.map(|tool| tool.steps.as_slice()).unwrap_or_default();
        let (resume, answers) =
            self.prepare(context, &binding, request.request_state.as_deref(), request.input_responses.clone(), steps)?;
        let client = RequestClient { handler: self, context, answers };
        // A tool with `task:`: a task for a client that declared the extension.
        if let Some(tool) = found
            && let Some(task) = tool.task
        {
            let capabilities = context.client_capabilities().unwrap_or_default();
            if capabilities.supports_tasks() {
                let (arguments, owner) = (request.arguments.clone().unwrap_or_default(), self.owner(context));
                let call = tasks::Call {
                    catalog: &snapshot.catalog,
                    tool,
                    arguments,
                    owner,
                    client: &client,
                    capabilities,
                    resume,
                    caller: caller(context).cloned(),
                };
                return match Box::pin(self.shared.tasks.start(&self.shared, call)).await? {
                    Asked::Done(response) => Ok(response),
                    Asked::Input(asked) => Ok(self.input_required(&binding, asked)?.into()),
                };
            }
            if task.mode == TaskMode::Required {
                return Err(ErrorData::missing_required_client_capability(
                    ClientCapabilities::builder().enable_tasks().build(),
                ));
            }
        }
        let called = snapshot.call_tool(&request.name, request.arguments.clone(), &client, resume).await?;
        let (mut result, changed) = match called {
            Asked::Done(done) => done,
            Asked::Input(asked) => return Ok(self.input_required(&binding, asked)?.into()),
        };
        if let Some(database) = changed {
            self.shared.wrote(&database);
        }
        if !super::modern(context) {
            wrap_for_legacy(&mut result);
        }
        if result.is_error == Some(true) {
            let text = result.content.iter().find_map(|c| c.as_text().map(|t| t.text.clone())).unwrap_or_default();
            self.log(context, LoggingLevel::Notice, "carte.tools", || json!({ "tool": request.name, "error": text }))
                .await;
        } else {
            let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
            self.log(context, LoggingLevel::Debug, "carte.tools", || json!({ "tool": request.name, "ms": elapsed_ms }))
                .await;
        }
        Ok(result.into())
    }
}

/// Before 2026-07-28, `structuredContent` must be an object: a result whose
/// value is a list, a string or a number (`json: true` with a list) reaches
/// such a client as `{"result": value}`, as FastMCP does, instead of not at
/// all (rmcp would drop it).
fn wrap_for_legacy(result: &mut rmcp::model::CallToolResult) {
    if let Some(value) = result.structured_content.take_if(|value| !value.is_object()) {
        result.structured_content = Some(json!({ "result": value }));
    }
}

/// Marks an HTTP request whose tool call the HTTP layer counted already
/// against the rate limits (and let through).
#[derive(Debug, Clone, Copy)]
pub struct RateCounted;

/// The error of a call past a rate limit: -32000 with `data.retryAfterMs`.
pub fn rate_limited(refused: crate::rate_limit::Refused) -> ErrorData {
    let ms = u64::try_from(refused.retry_after.as_millis()).unwrap_or(u64::MAX).max(1);
    let whose = if refused.by_tool { "this tool's" } else { "the server's" };
    ErrorData::new(
        rmcp::model::ErrorCode(-32000),
        format!("rate limit: too many calls ({whose} `rateLimit`); try again in {ms} ms"),
        Some(serde_json::json!({ "retryAfterMs": ms })),
    )
}

/// Who an HTTP request is (see [`Handler::owner`]), from its headers and its
/// verified OAuth caller; `None` for a legacy request without a session.
pub fn http_owner(modern: bool, headers: &axum::http::HeaderMap, caller: Option<&Caller>) -> Option<String> {
    if !modern {
        return crate::server::http::guard::session_id(headers).map(|id| format!("session:{id}"));
    }
    if let Some(caller) = caller {
        return Some(caller.owner.clone());
    }
    Some(match headers.get(axum::http::header::AUTHORIZATION) {
        Some(token) => format!("bearer:{}", crate::audit::sha256(token.as_bytes())),
        None => "http".to_owned(),
    })
}
