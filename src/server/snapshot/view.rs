//! [`View`]: a snapshot as one client sees it — every tool, or one
//! toolset's only — and the paged lists it answers (`tools/list` and the
//! others: [`Listing`], opaque cursors).

use std::sync::Arc;

use crate::catalog::presentation::Cache;
use base64::Engine as _;
use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use rmcp::model::{
    CallToolResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, Prompt,
    Resource, ResourceTemplate, Tool,
};
use serde_json::{Map, Value, json};

use super::{Answer, Asked, PAGE_SIZE, RequestError, Snapshot, answer, cancelled, tool_result};
use crate::catalog::{self, Catalog};
use crate::run;
use crate::run::steps::Resume;

/// The tools one toolset's clients see.
pub(super) struct Toolset {
    /// Its tools, in declaration order.
    pub(super) tools: Vec<Tool>,
    /// Their names.
    pub(super) names: std::collections::HashSet<String>,
    /// `_meta` of its clients' list results: the generation, and the
    /// fingerprint of the lists they see.
    pub(super) meta: rmcp::model::MetaObject,
}

/// The error of a request for a toolset the catalog does not have (any
/// more): -32600, naming the toolsets there are.
pub fn unknown_toolset(catalog: &Catalog, name: &str) -> RequestError {
    let there: Vec<&str> = catalog.toolsets.keys().map(String::as_str).collect();
    let message = if there.is_empty() {
        format!("toolset `{name}` is not in the catalog, which has no toolsets")
    } else {
        format!("toolset `{name}` is not in the catalog; its toolsets are: {}", there.join(", "))
    };
    RequestError {
        code: ErrorCode::INVALID_REQUEST.0,
        message,
        data: Some(json!({ "toolset": name, "toolsets": there })),
    }
}

/// A snapshot as one client sees it: every tool, or one toolset's only.
/// Every request reaches the tools through this (`tools/list`, `tools/call`,
/// tasks, the SEP-2243 header check), so a toolset's restriction lives here
/// and nowhere else; prompts and resources are the whole catalog's.
#[derive(Clone)]
pub struct View {
    snapshot: Arc<Snapshot>,
    /// The toolset, known to be in `snapshot` (`None`: every tool).
    toolset: Option<Arc<str>>,
}

impl std::ops::Deref for View {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.snapshot
    }
}

impl View {
    /// `snapshot` with every tool.
    pub fn all(snapshot: Arc<Snapshot>) -> View {
        View { snapshot, toolset: None }
    }

    /// `snapshot` as a client of `toolset` sees it (`None`: every tool); an
    /// error if the catalog has no such toolset.
    pub fn of(snapshot: Arc<Snapshot>, toolset: Option<&Arc<str>>) -> Result<View, RequestError> {
        match toolset {
            None => Ok(View::all(snapshot)),
            Some(name) if snapshot.toolsets.contains_key(&**name) => Ok(View { snapshot, toolset: Some(name.clone()) }),
            Some(name) => Err(unknown_toolset(&snapshot.catalog, name)),
        }
    }

    fn restriction(&self) -> Option<&Toolset> {
        self.toolset.as_deref().and_then(|name| self.snapshot.toolsets.get(name))
    }

    /// The tools this view lists.
    fn tools(&self) -> &[Tool] {
        match self.restriction() {
            Some(toolset) => &toolset.tools,
            None => &self.snapshot.tools,
        }
    }

    /// The catalog's tool `name`, if this view has it.
    pub fn tool(&self, name: &str) -> Option<&catalog::Tool> {
        match self.restriction() {
            Some(toolset) if !toolset.names.contains(name) => None,
            _ => self.snapshot.catalog.tool(name),
        }
    }

    /// The tool `name`, if this view has it and its arguments travel in
    /// `Mcp-Param-*` headers too (SEP-2243), for rmcp to check those headers
    /// against the body.
    pub(in crate::server) fn header_tool(&self, name: &str) -> Option<&Tool> {
        self.tool(name)?;
        self.snapshot.header_tools.get(name)
    }

    /// One page of a list (`tools/list`, `prompts/list`, `resources/list`,
    /// `resources/templates/list`: which one, the result type says).
    pub(in crate::server) fn list<L: Listing>(&self, cursor: Option<&str>) -> Result<L, ErrorData> {
        let (page, next) = paginate(L::items(self), cursor)?;
        let meta = self.restriction().map_or(&self.snapshot.meta, |toolset| &toolset.meta);
        Ok(L::page(page.to_vec(), next, meta.clone(), self.snapshot.catalog.server.cache))
    }

    /// One page of the tools this view lists that `allowed` keeps (a
    /// caller's, by their scopes); the cursor counts the kept tools.
    pub(in crate::server) fn list_tools_where(
        &self,
        cursor: Option<&str>,
        allowed: impl Fn(&catalog::Tool) -> bool,
    ) -> Result<ListToolsResult, ErrorData> {
        let kept: Vec<Tool> = self
            .tools()
            .iter()
            // A listed tool the catalog lacks is carte's own (`find_tools`): always kept.
            .filter(|tool| self.snapshot.catalog.tool(&tool.name).is_none_or(&allowed))
            .cloned()
            .collect();
        let (page, next) = paginate(&kept, cursor)?;
        let meta = self.restriction().map_or(&self.snapshot.meta, |toolset| &toolset.meta);
        Ok(<ListToolsResult as Listing>::page(page.to_vec(), next, meta.clone(), self.snapshot.catalog.server.cache))
    }

    /// One page of a list as JSON, as a client receives it.
    pub fn list_page(&self, kind: ListKind, cursor: Option<&str>) -> Answer {
        match kind {
            ListKind::Tools => answer(self.list::<ListToolsResult>(cursor)),
            ListKind::Prompts => answer(self.list::<ListPromptsResult>(cursor)),
            ListKind::Resources => answer(self.list::<ListResourcesResult>(cursor)),
            ListKind::Templates => answer(self.list::<ListResourceTemplatesResult>(cursor)),
        }
    }

    /// A whole list as JSON, every page joined, as `carte list` prints it.
    pub fn list_json(&self, kind: ListKind) -> Value {
        let (key, items) = match kind {
            ListKind::Tools => ("tools", serde_json::to_value(self.tools())),
            ListKind::Prompts => ("prompts", serde_json::to_value(&self.snapshot.prompts)),
            ListKind::Resources => ("resources", serde_json::to_value(&self.snapshot.resources)),
            ListKind::Templates => ("resourceTemplates", serde_json::to_value(&self.snapshot.resource_templates)),
        };
        json!({ key: items.unwrap_or(Value::Null) })
    }

    /// `tools/call` as JSON: an unknown tool is -32602; everything else is a
    /// result (`isError` when the tool failed); a cancelled call is -32800.
    pub async fn call_tool_json(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        client: &dyn run::steps::Client,
    ) -> Answer {
        let called = self.call_tool(name, arguments, client, Resume::default()).await;
        answer(called.and_then(|asked| asked.done(name)).map(|(result, _)| result))
    }

    /// `tools/call` from `resume`: a tool this view does not have is -32602
    /// (as one the catalog does not have); everything else is a result, or
    /// the questions the client must answer first. A cancelled call is an
    /// error response (which the stdio transport drops: a cancelled request
    /// gets no answer). With the result comes the database the call's
    /// committed write changed, if any.
    pub(in crate::server) async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        client: &dyn run::steps::Client,
        resume: Resume,
    ) -> Result<Asked<(CallToolResult, Option<String>)>, ErrorData> {
        let Some(tool) = self.tool(name) else {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`"), Some(json!({ "name": name }))));
        };
        let catalog = &self.snapshot.catalog;
        match run::call(catalog, tool, arguments.unwrap_or_default(), client, resume).await {
            Ok(mut outcome) => {
                let changed = outcome.changed.take();
                Ok(Asked::Done((tool_result(outcome), changed)))
            }
            Err(run::Halted::Cancelled) => Err(cancelled()),
            Err(run::Halted::InputRequired(asked)) => Ok(Asked::Input(asked)),
        }
    }
}

/// Which list a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    Templates,
}

/// A list result type and the snapshot's items it pages through.
pub(in crate::server) trait Listing {
    /// One item of the list.
    type Item: Clone;
    /// Every item of this list in `view`.
    fn items(view: &View) -> &[Self::Item];
    /// The result for one page, with how long clients may keep it.
    fn page(items: Vec<Self::Item>, next: Option<String>, meta: rmcp::model::MetaObject, cache: Option<Cache>) -> Self;
}

macro_rules! listing {
    ($result:ty, $item:ty, $field:ident) => {
        impl Listing for $result {
            type Item = $item;
            fn items(view: &View) -> &[$item] {
                $field(view)
            }
            fn page(
                items: Vec<$item>,
                next: Option<String>,
                meta: rmcp::model::MetaObject,
                cache: Option<Cache>,
            ) -> Self {
                let mut result = <$result>::with_all_items(items);
                result.next_cursor = next;
                result.meta = Some(meta);
                if let Some(cache) = cache {
                    result.ttl_ms = Some(cache.ttl_ms);
                    result.cache_scope = Some(super::cache_scope(cache.scope));
                }
                result
            }
        }
    };
}

listing!(ListToolsResult, Tool, tools_of);
listing!(ListPromptsResult, Prompt, prompts_of);
listing!(ListResourcesResult, Resource, resources_of);
listing!(ListResourceTemplatesResult, ResourceTemplate, templates_of);

fn tools_of(view: &View) -> &[Tool] {
    view.tools()
}

fn prompts_of(view: &View) -> &[Prompt] {
    &view.snapshot.prompts
}

fn resources_of(view: &View) -> &[Resource] {
    &view.snapshot.resources
}

fn templates_of(view: &View) -> &[ResourceTemplate] {
    &view.snapshot.resource_templates
}

/// Opaque cursors: base64 of the offset, so clients cannot mistake them for numbers.
fn paginate<'a, T>(items: &'a [T], cursor: Option<&str>) -> Result<(&'a [T], Option<String>), ErrorData> {
    let start = match cursor {
        None => 0,
        Some(cursor) => decode_cursor(cursor)
            .filter(|&offset| offset <= items.len())
            .ok_or_else(|| ErrorData::invalid_params(format!("invalid cursor `{cursor}`"), None))?,
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next =
        (end < items.len()).then(|| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("offset:{end}")));
    Ok((&items[start..end], next))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix("offset:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toolset_view_has_only_its_tools_everywhere() {
        let yaml = r#"
toolsets: { readonly: [find] }
tools:
  - name: find
    description: Finds.
    inputSchema: { type: object, properties: { region: { type: string, x-mcp-header: Region } } }
    run: { text: found }
  - name: book
    description: Books.
    inputSchema: { type: object, properties: { region: { type: string, x-mcp-header: Region } } }
    run: { text: booked }
"#;
        let snapshot = Arc::new(Snapshot::new(crate::catalog::from_text(yaml)));
        let all = View::all(snapshot.clone());
        let readonly = View::of(snapshot.clone(), Some(&Arc::from("readonly"))).unwrap();
        let names = |view: &View| {
            let listed = view.list::<ListToolsResult>(None).unwrap();
            listed.tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(names(&all), ["find", "book"]);
        assert_eq!(names(&readonly), ["find"]);
        assert!(readonly.tool("book").is_none() && readonly.tool("find").is_some());
        // The SEP-2243 header check sees only the toolset's tools too.
        assert!(all.header_tool("book").is_some());
        assert!(readonly.header_tool("book").is_none() && readonly.header_tool("find").is_some());
        // Its clients' fingerprint is that of what they see.
        let fingerprint =
            |view: &View| view.list::<ListToolsResult>(None).unwrap().meta.unwrap().0["carte/fingerprint"].clone();
        assert_ne!(fingerprint(&all), fingerprint(&readonly));
        let missing = View::of(snapshot, Some(&Arc::from("nope"))).err().unwrap();
        assert_eq!(missing.code, ErrorCode::INVALID_REQUEST.0);
        assert_eq!(missing.message, "toolset `nope` is not in the catalog; its toolsets are: readonly");
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let items: Vec<usize> = (0..250).collect();
        let (page, next) = paginate(&items, None).unwrap();
        assert_eq!(page.len(), 100);
        let (page, next) = paginate(&items, next.as_deref()).unwrap();
        assert_eq!(page[0], 100);
        let (page, next) = paginate(&items, next.as_deref()).unwrap();
        assert_eq!((page.len(), next), (50, None));
        assert_eq!(paginate(&items, Some("nope")).unwrap_err().code, rmcp::model::ErrorCode::INVALID_PARAMS);
    }
}
