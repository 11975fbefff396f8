//! What tools, prompts and resources produce, before it becomes MCP types:
//! content blocks (an embedded resource is a [`ResourceBody`]), and rendering a declared [`Block`]
//! into one. Tools and prompts share this, so an image or an embedded
//! resource behaves the same in both.

use std::sync::Arc;

use crate::catalog::{Block, Catalog, MediaKind};
use crate::render::{self, RenderError};
use crate::resource::{self, ReadError, ResourceBody};

/// One rendered content block.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Text.
    Text(String),
    /// Image or audio, base64.
    Media {
        /// Image or audio.
        kind: MediaKind,
        /// Base64 data.
        data: Arc<str>,
        /// MIME type.
        mime_type: String,
    },
    /// An embedded resource.
    Resource(ResourceBody),
    /// A link to a resource.
    ResourceLink {
        /// Its URI.
        uri: String,
        /// Its name.
        name: String,
        /// A display name.
        title: Option<String>,
        /// What it is.
        description: Option<String>,
        /// Its MIME type.
        mime_type: Option<String>,
    },
}

/// Why a block could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// A template failed (or called `fail()`).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// An embedded resource does not exist or failed to render.
    #[error("resource `{uri}`: {reason}")]
    Resource {
        /// The URI asked for.
        uri: String,
        /// Why it could not be read.
        reason: String,
    },
}

/// Renders one declared block with `context`.
pub fn render_block(catalog: &Catalog, block: &Block, context: &minijinja::Value) -> Result<Output, BlockError> {
    Ok(match block {
        Block::Text(template) => Output::Text(render::render(&catalog.templates, template, context.clone())?),
        Block::Media { kind, data, mime_type } => {
            Output::Media { kind: *kind, data: data.clone(), mime_type: mime_type.clone() }
        }
        Block::Resource(template) => {
            let uri = render::render(&catalog.templates, template, context.clone())?;
            let body = resource::read(catalog, uri.trim()).map_err(|err| BlockError::Resource {
                uri: uri.trim().to_owned(),
                reason: match err {
                    ReadError::NotFound => "no such resource".to_owned(),
                    ReadError::Rejected(message) => format!("no such resource: {message}"),
                    err => err.to_string(),
                },
            })?;
            Output::Resource(body)
        }
        Block::ResourceLink { uri, name, title, description, mime_type } => Output::ResourceLink {
            uri: render::render(&catalog.templates, uri, context.clone())?.trim().to_owned(),
            name: name.clone(),
            title: title.clone(),
            description: description.clone(),
            mime_type: mime_type.clone(),
        },
    })
}
