//! Finding tools in a large catalog (`server.discovery: search`):
//! `tools/list` holds carte's `find_tools` and the pinned tools; `find_tools`
//! returns the definitions of the tools whose name, title or description
//! hold the words asked for, and adds them to this session's list (with
//! `notifications/tools/list_changed`). Any tool may be called by name,
//! listed or not.

use std::collections::HashSet;

use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, Tool};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::{Handler, caller};
use crate::catalog::FIND_TOOLS;
use crate::sync::lock;

/// Tools one search returns by default, and at most.
const DEFAULT_LIMIT: u64 = 10;
const MAX_LIMIT: u64 = 50;

/// `find_tools`' definition, listed first under `discovery: search`.
pub(crate) fn find_tools_definition(count: usize) -> Option<Tool> {
    let wire = json!({
        "name": FIND_TOOLS,
        "title": "Find tools",
        "description": format!(
            "Searches this server's {count} tools by words of their names and descriptions and returns the \
             definitions of those that match; the tools found join your tool list and can be called by name. \
             Use it before asking for a tool you do not see."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": { "type": "string", "description": "Words the tool's name or description holds, e.g. `refund order`" },
                "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "How many tools at most (default 10)" }
            },
            "required": ["query"]
        },
        "annotations": { "readOnlyHint": true }
    });
    serde_json::from_value(wire).ok()
}

impl Handler {
    /// `find_tools`: the matching tools of this view that the caller may
    /// use, best first; they join this session's list.
    pub(super) async fn find_tools(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let Some(query) = arguments.get("query").and_then(Value::as_str) else {
            return Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                "`find_tools` needs `query`: words the tool's name or description holds",
            )])
            .into());
        };
        let limit = arguments.get("limit").and_then(Value::as_u64).unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
        let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        let view = self.view()?;
        let scopes_ok =
            |tool: &crate::catalog::Tool| caller(context).is_none_or(|c| c.missing(&tool.scopes).is_empty());
        let mut found: Vec<(usize, &crate::catalog::Tool)> = view
            .catalog
            .tools
            .iter()
            .filter(|tool| view.tool(&tool.name).is_some() && scopes_ok(tool))
            .filter_map(|tool| {
                let text = [tool.wire.get("name"), tool.wire.get("title"), tool.wire.get("description")]
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase();
                let score = words.iter().filter(|word| text.contains(word.as_str())).count();
                (score > 0).then_some((score, tool))
            })
            .collect();
        // Best first; ties in catalog order (the sort is stable).
        found.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
        found.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let added = {
            let mut discovered = lock(&self.discovered);
            let before = discovered.len();
            discovered.extend(found.iter().map(|(_, tool)| tool.name.clone()));
            discovered.len() > before
        };
        let tools: Vec<Value> = found.iter().map(|(_, tool)| Value::Object(tool.wire.clone())).collect();
        if added {
            // Only this session's list changed.
            let _ = context.peer.notify_tool_list_changed().await;
        }
        Ok(CallToolResult::structured(json!({ "tools": tools })).into())
    }
}

/// The names a session found (bounded by the catalog's tools).
pub(super) type Discovered = std::sync::Mutex<HashSet<String>>;
