//! Reading a resource by URI from a catalog snapshot: fixed resources first,
//! then resource templates (whose variables the body template sees). A
//! template's body that calls `fail()` rejects the URI: not found, with
//! its message. What a read produces, [`ResourceBody`], is defined here; content
//! blocks embed it (`content` depends on `resource`, never the reverse).

use base64::Engine as _;
use minijinja::Value;

use crate::catalog::{Body, Catalog};
use crate::render::{self, RenderError};

/// The contents of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceBody {
    /// The URI that was read.
    pub uri: String,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// Text or base64 bytes.
    pub contents: Contents,
}

/// Text or binary resource contents.
#[derive(Debug, Clone, PartialEq)]
pub enum Contents {
    /// UTF-8 text.
    Text(String),
    /// Base64 of the bytes.
    Blob(String),
}

/// Why a resource could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No resource or template matches the URI.
    #[error("resource not found")]
    NotFound,
    /// A resource template's body rejected the URI's variables with
    /// `fail("message")`: to the client, that resource does not exist.
    #[error("{0}")]
    Rejected(String),
    /// Its body template failed.
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// Reads the resource at `uri`.
pub fn read(catalog: &Catalog, uri: &str) -> Result<ResourceBody, ReadError> {
    if let Some(resource) = catalog.resource(uri) {
        let contents = match &resource.body {
            Body::Template(template) => {
                let context = minijinja::context! { data => catalog.data.clone(), uri => uri };
                Contents::Text(render::render(&catalog.env, template, context)?)
            }
            Body::Bytes { bytes, text: true } => Contents::Text(String::from_utf8_lossy(bytes).into_owned()),
            Body::Bytes { bytes, text: false } => {
                Contents::Blob(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        };
        return Ok(ResourceBody { uri: uri.to_owned(), mime_type: resource.mime_type.clone(), contents });
    }
    let (template, variables) = catalog.match_template(uri).ok_or(ReadError::NotFound)?;
    let mut context: std::collections::BTreeMap<String, Value> =
        variables.into_iter().map(|(name, value)| (name, Value::from(value))).collect();
    context.insert("data".to_owned(), catalog.data.clone());
    context.insert("uri".to_owned(), Value::from(uri));
    let text = render::render(&catalog.env, &template.body, Value::from(context)).map_err(|err| match err {
        RenderError::Failed(message) => ReadError::Rejected(message),
        err => ReadError::Render(err),
    })?;
    Ok(ResourceBody { uri: uri.to_owned(), mime_type: template.mime_type.clone(), contents: Contents::Text(text) })
}
