//! carte's own answers in rmcp's types: a tool's outcome as a
//! `CallToolResult`, content blocks, a resource's contents (with an app's
//! `_meta`), a cache scope.

use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents};

use crate::catalog::{self, MediaKind};
use crate::content::Output;
use crate::resource::{Contents, ResourceBody};
use crate::run::ToolOutcome;

/// A tool outcome as MCP's `CallToolResult`.
pub(in crate::server) fn tool_result(outcome: ToolOutcome) -> CallToolResult {
    let blocks = outcome.blocks.into_iter().map(content_block).collect();
    let mut result = if outcome.is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
    result.structured_content = outcome.structured;
    result
}

pub(super) fn content_block(output: Output) -> ContentBlock {
    match output {
        Output::Text(text) => ContentBlock::text(text),
        Output::Media { kind: MediaKind::Image, data, mime_type } => ContentBlock::image(data.to_string(), mime_type),
        Output::Media { kind: MediaKind::Audio, data, mime_type } => ContentBlock::audio(data.to_string(), mime_type),
        Output::Resource(body) => ContentBlock::resource(resource_contents(body)),
        Output::ResourceLink { uri, name, title, description, mime_type } => {
            let mut resource = Resource::new(uri, name);
            if let Some(title) = title {
                resource = resource.with_title(title);
            }
            if let Some(description) = description {
                resource = resource.with_description(description);
            }
            if let Some(mime) = mime_type {
                resource = resource.with_mime_type(mime);
            }
            ContentBlock::resource_link(resource)
        }
    }
}

pub(super) fn resource_contents(body: ResourceBody) -> ResourceContents {
    let contents = match body.contents {
        Contents::Text(text) => ResourceContents::text(text, body.uri),
        Contents::Blob(blob) => ResourceContents::blob(blob, body.uri),
    };
    let mut contents = match body.mime_type {
        Some(mime) => contents.with_mime_type(mime),
        None => contents,
    };
    if let Some(serde_json::Value::Object(meta)) = body.meta {
        match &mut contents {
            ResourceContents::TextResourceContents { meta: slot, .. }
            | ResourceContents::BlobResourceContents { meta: slot, .. } => *slot = Some(rmcp::model::MetaObject(meta)),
            _ => {}
        }
    }
    contents
}

/// rmcp's cache scope of a catalog's.
pub(in crate::server) fn cache_scope(scope: catalog::presentation::CacheScope) -> rmcp::model::CacheScope {
    match scope {
        catalog::presentation::CacheScope::Public => rmcp::model::CacheScope::Public,
        catalog::presentation::CacheScope::Private => rmcp::model::CacheScope::Private,
    }
}
