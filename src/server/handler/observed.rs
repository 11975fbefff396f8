//! What every request goes through: [`Handler::observed`] answers it
//! inside its trace span and records it in the metrics — how long it took,
//! how it ended; the session it belongs to is recorded when the handler is
//! dropped.

use std::future::Future;
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::model::JsonObject;
use rmcp::service::{RequestContext, RoleServer};

use super::{Handler, modern};
use crate::metrics;
use crate::server::trace::{self, Outcome, Target};

impl Handler {
    /// Answers a request of `method` with `work`, inside the request's trace
    /// span (see [`trace::traced`]) and measured: how long it took and how it
    /// ended. A request whose client went away (the future dropped) is not
    /// recorded. A request of a legacy session, or any over stdio, makes
    /// this handler a session.
    pub(super) async fn observed<T: Outcome>(
        &self,
        context: &RequestContext<RoleServer>,
        method: &'static str,
        target: Target<'_>,
        work: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        self.observed_with(context, (method, target, None), work).await
    }

    /// [`Handler::observed`] for a request with `arguments` (their digest goes
    /// to the audit log, if one is kept).
    pub(super) async fn observed_with<T: Outcome>(
        &self,
        context: &RequestContext<RoleServer>,
        (method, target, arguments): (&'static str, Target<'_>, Option<&JsonObject>),
        work: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        let over_http = context.extensions.get::<axum::http::request::Parts>().is_some();
        let network_transport = if over_http { metrics::Transport::Tcp } else { metrics::Transport::Pipe };
        let version = context.protocol_version();
        let mcp_protocol_version = metrics::protocol_version(version.as_ref().map(|version| version.as_str()));
        // After `initialize`, when the session's version is known.
        if method != "initialize" && (!over_http || !modern(context)) {
            let _ = self.session_labels.set(metrics::Session { mcp_protocol_version, network_transport });
        }
        let gen_ai_tool_name = match &target {
            // Bounded by the catalog: a name it lacks is one label.
            Target::Tool(name) => {
                Some(metrics::tool_label(name, self.view().is_ok_and(|view| view.tool(name).is_some())))
            }
            _ => None,
        };
        let started = Instant::now();
        let named = match &target {
            Target::Tool(name) | Target::Prompt(name) | Target::Resource(name) => Some(*name),
            Target::None => None,
        };
        let resource = matches!(target, Target::Resource(_));
        let result = trace::traced(context, method, target, work).await;
        let error_type = match &result {
            Ok(answer) if answer.is_tool_error() => metrics::Ending::ToolError,
            Ok(_) => metrics::Ending::Answered,
            Err(error) => metrics::Ending::Error(error.code.0),
        };
        let labels = metrics::Operation {
            mcp_method_name: method,
            gen_ai_tool_name,
            error_type,
            mcp_protocol_version,
            network_transport,
        };
        metrics::operation(&labels, started.elapsed());
        if let Some(audit) = self.shared.audit.get() {
            let caller = self.owner(context);
            let (outcome, code) = match &result {
                Ok(answer) if answer.is_tool_error() => ("tool_error", None),
                Ok(_) => ("ok", None),
                Err(error) => ("error", Some(error.code.0)),
            };
            // A resource template's URI carries values: only its digest.
            let fixed = |uri: &str| self.shared.snapshot().catalog.resource(uri).is_some();
            let (name, uri_sha256) = match named {
                Some(uri) if resource && !fixed(uri) => (None, Some(crate::audit::sha256(uri.as_bytes()))),
                other => (other, None),
            };
            audit.record(crate::audit::Entry {
                time: crate::audit::now(),
                caller: &caller,
                method,
                name,
                uri_sha256,
                outcome,
                code,
                duration_ms: crate::audit::millis(started.elapsed()),
                arguments_sha256: crate::audit::arguments_sha256(arguments),
                dropped: None,
            });
        }
        result
    }
}
