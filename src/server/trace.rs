//! The server span of each request, after the MCP semantic conventions:
//! named `"{method} {target}"` (`tools/call get_quote`; the method alone
//! where there is no tool or prompt), kind SERVER, with
//! `mcp.method.name`, `gen_ai.tool.name` or `gen_ai.prompt.name`,
//! `mcp.resource.uri`, `jsonrpc.request.id`, `mcp.protocol.version`,
//! `mcp.session.id` (legacy HTTP sessions) and `network.transport` (`pipe`
//! on stdio, `tcp` over HTTP); its parent is the `traceparent` in the
//! request's `_meta`. A failure sets `error.type`: the JSON-RPC code, or
//! `tool_error` for a result with `isError`.
//!
//! With traces off the span is disabled (see [`crate::telemetry`]) and
//! nothing here does any work.

use std::future::Future;

use rmcp::ErrorData;
use rmcp::model::{CallToolResponse, GetPromptResponse, ReadResourceResponse};
use rmcp::service::{RequestContext, RoleServer};
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::telemetry::{self, TARGET};

/// What the request is about: the tool, prompt or resource it names.
pub(super) enum Target<'a> {
    /// A list, completion or other request that names nothing.
    None,
    /// `tools/call`.
    Tool(&'a str),
    /// `prompts/get`.
    Prompt(&'a str),
    /// `resources/read`: the URI is an attribute, not part of the name.
    Resource(&'a str),
}

/// Answers the request with `answer` inside its server span.
pub(super) async fn traced<T: Outcome>(
    context: &RequestContext<RoleServer>,
    method: &'static str,
    target: Target<'_>,
    answer: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let span = request_span(context, method, target);
    if span.is_disabled() {
        return answer.await;
    }
    let answered = answer.instrument(span.clone()).await;
    match &answered {
        Err(err) => telemetry::failed(&span, err.code.0),
        Ok(result) if result.is_tool_error() => telemetry::failed(&span, "tool_error"),
        Ok(_) => {}
    }
    answered
}

/// The span of one request (disabled while traces are off).
fn request_span(context: &RequestContext<RoleServer>, method: &'static str, target: Target<'_>) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "mcp request",
        otel.name = Empty,
        otel.kind = "server",
        mcp.method.name = method,
        jsonrpc.request.id = %context.id,
        network.transport = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let name = match target {
        Target::Tool(name) => {
            telemetry::attribute(&span, "gen_ai.tool.name", name.to_owned());
            telemetry::attribute(&span, "gen_ai.operation.name", "execute_tool");
            format!("{method} {name}")
        }
        Target::Prompt(name) => {
            telemetry::attribute(&span, "gen_ai.prompt.name", name.to_owned());
            format!("{method} {name}")
        }
        Target::Resource(uri) => {
            telemetry::attribute(&span, "mcp.resource.uri", uri.to_owned());
            method.to_owned()
        }
        Target::None => method.to_owned(),
    };
    span.record("otel.name", name);
    let http = context.extensions.get::<axum::http::request::Parts>();
    span.record("network.transport", if http.is_some() { "tcp" } else { "pipe" });
    if let Some(version) = context.protocol_version() {
        telemetry::attribute(&span, "mcp.protocol.version", version.to_string());
    }
    let session = http.and_then(|parts| super::http::guard::session_id(&parts.headers));
    if let Some(session) = session {
        telemetry::attribute(&span, "mcp.session.id", session.to_owned());
    }
    telemetry::set_parent(&span, context.meta.get_traceparent(), context.meta.get_tracestate());
    span
}

/// Whether an answer is a failed tool result (`isError`).
pub(super) trait Outcome {
    /// `true` for a tool's error result.
    fn is_tool_error(&self) -> bool {
        false
    }
}

impl Outcome for CallToolResponse {
    fn is_tool_error(&self) -> bool {
        matches!(self, CallToolResponse::Complete(result) if result.is_error == Some(true))
    }
}

impl Outcome for () {}
impl Outcome for rmcp::model::InitializeResult {}
impl Outcome for rmcp::model::GetTaskResult {}
impl Outcome for GetPromptResponse {}
impl Outcome for ReadResourceResponse {}
impl Outcome for rmcp::model::ListToolsResult {}
impl Outcome for rmcp::model::ListPromptsResult {}
impl Outcome for rmcp::model::ListResourcesResult {}
impl Outcome for rmcp::model::ListResourceTemplatesResult {}
impl Outcome for rmcp::model::ListSkillsResult {}
impl Outcome for rmcp::model::GetSkillResult {}
impl Outcome for rmcp::model::CompleteResult {}
