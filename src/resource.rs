//! Reading a resource by URI from a catalog snapshot: fixed resources first,
//! then resource templates (whose variables the body template sees). A
//! template's body that calls `fail()` rejects the URI: not found, with
//! its message. What a read produces, [`ResourceBody`], is defined here; content
//! blocks embed it (`content` depends on `resource`, never the reverse).
//!
//! A resource that names an effect (`sql:`, `http:`, `command:`) runs it
//! when it is read ([`read_found`]; a statement through the database's
//! `transact`, holding no runtime thread, bounded by the database's
//! timeout), and its body template sees the effect's output (`rows` and
//! `truncated` for `sql`); without a template, the body is the effect's
//! value. Matching and rendering run inline first, then on the render pool.
//! [`read`], for callers that cannot wait (a resource embedded in a result
//! that renders on the blocking pool, the reload diff), reads every other
//! resource and refuses those.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use minijinja::Value;
use serde_json::Map;

use crate::catalog::{Body, Catalog, Step};
use crate::effect::{self, ReadEffect, Reads};
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
    /// The `_meta` the contents carry (an app's `ui`: its CSP).
    pub meta: Option<serde_json::Value>,
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
    /// Its effect failed (a statement ran past the database's timeout, an
    /// api answered 500): `key` says which.
    #[error("its `{key}` failed: {reason}")]
    Effect {
        /// The effect's key.
        key: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// It runs an effect, which this caller cannot wait for ([`read`]).
    #[error("it {} when it is read, so it cannot be embedded; link it with `resource_link` instead", .0.does)]
    Live(Reads),
    /// It has steps, which this caller cannot run ([`read`]).
    #[error(
        "it has `steps`, which run when a client reads it, so it cannot be embedded; link it with `resource_link` instead"
    )]
    Steps,
}

/// What a URI names in a catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The fixed resource at this index of `catalog.resources`.
    Resource(usize),
    /// The resource template at this index of `catalog.resource_templates`,
    /// with the URI's variables.
    Template(usize, Vec<(String, String)>),
}

impl Found {
    /// The effect a read of it runs, if any.
    pub fn effect<'c>(&self, catalog: &'c Catalog) -> Option<&'c ReadEffect> {
        match self {
            Found::Resource(idx) => catalog.resources.get(*idx)?.read.as_ref(),
            Found::Template(idx, _) => catalog.resource_templates.get(*idx)?.read.as_ref(),
        }
    }

    /// How long clients may keep a read of it (its own `cache`, else the server's).
    pub fn cache(&self, catalog: &Catalog) -> Option<crate::catalog::presentation::Cache> {
        let own = match self {
            Found::Resource(idx) => catalog.resources.get(*idx).and_then(|r| r.cache),
            Found::Template(idx, _) => catalog.resource_templates.get(*idx).and_then(|t| t.cache),
        };
        own.or(catalog.server.cache)
    }

    /// The steps a read of it runs first.
    pub fn steps<'c>(&self, catalog: &'c Catalog) -> &'c [Step] {
        let steps = match self {
            Found::Resource(idx) => catalog.resources.get(*idx).map(|r| &r.steps),
            Found::Template(idx, _) => catalog.resource_templates.get(*idx).map(|t| &t.steps),
        };
        steps.map(Vec::as_slice).unwrap_or_default()
    }
}

/// What `uri` names in `catalog` (matching a template is linear in the URI).
pub fn find(catalog: &Catalog, uri: &str) -> Result<Found, ReadError> {
    if let Some(idx) = catalog.resource_position(uri) {
        return Ok(Found::Resource(idx));
    }
    catalog
        .resource_templates
        .iter()
        .enumerate()
        .find_map(|(idx, template)| {
            template.template.match_uri(uri).ok().flatten().map(|vars| Found::Template(idx, vars))
        })
        .ok_or(ReadError::NotFound)
}

/// The entry of an effect's block (a database) whose writes change what the
/// resource at `uri` reads, if a write is known to (see [`ReadEffect::watches`]).
pub fn database_of<'c>(catalog: &'c Catalog, uri: &str) -> Option<&'c str> {
    find(catalog, uri).ok()?.effect(catalog)?.watches()
}

/// Reads the resource at `uri`, blocking; one that runs an effect is
/// [`ReadError::Live`] (see [`read_found`]).
pub fn read(catalog: &Catalog, uri: &str) -> Result<ResourceBody, ReadError> {
    let found = find(catalog, uri)?;
    if let Some(effect) = found.effect(catalog) {
        return Err(ReadError::Live(effect.reads()));
    }
    if !found.steps(catalog).is_empty() {
        return Err(ReadError::Steps);
    }
    let (context, value) = body_context(base_context(catalog, uri, &found), None);
    render_body(catalog, uri, &found, &context, value.as_ref())
}

/// Reads what `uri` names (`found`) with `context` (see [`base_context`],
/// plus what its steps produced): its effect (through `call`, which renders
/// the effect's templates with `context`), then its body, inline first (see
/// [`render::inline`]), in `caller`'s turn of the render pool if it does
/// not fit.
pub async fn read_found(
    catalog: &Arc<Catalog>,
    (uri, found): (&str, Found),
    context: BTreeMap<String, Value>,
    call: &dyn effect::Call,
    caller: &(dyn Fn() -> render::Caller + Sync),
) -> Result<ResourceBody, ReadError> {
    let output = match found.effect(catalog) {
        Some(effect) => {
            let variables = match &found {
                Found::Template(_, variables) => variables
                    .iter()
                    .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
                    .collect(),
                Found::Resource(_) => Map::new(),
            };
            let output = effect.read(call, variables).await;
            Some(output.map_err(|reason| ReadError::Effect { key: effect.key(), reason })?)
        }
        None => None,
    };
    let (context, value) = body_context(context, output);
    if let Some(body) = render::inline(|| render_body(catalog, uri, &found, &context, value.as_ref())) {
        return body;
    }
    let (owned, owned_uri) = (Arc::clone(catalog), uri.to_owned());
    render::pooled(caller(), move || render_body(&owned, &owned_uri, &found, &context, value.as_ref())).await?
}

/// What a resource's templates see before its effect runs: the URI's
/// variables, `data` and `uri`.
pub fn base_context(catalog: &Catalog, uri: &str, found: &Found) -> BTreeMap<String, Value> {
    // The URI's variables first: `data` and `uri` are what they always are.
    let mut context: BTreeMap<String, Value> = match found {
        Found::Template(_, variables) => {
            variables.iter().map(|(name, value)| (name.clone(), Value::from(value.as_str()))).collect()
        }
        Found::Resource(_) => BTreeMap::new(),
    };
    context.insert("data".to_owned(), catalog.data.clone());
    context.insert("uri".to_owned(), Value::from(uri));
    context
}

/// What a body's templates see: `context`, and the variables of its
/// effect's `output` if it has one; the effect's value (its last variable),
/// for a body that is it.
fn body_context(
    mut context: BTreeMap<String, Value>,
    output: Option<effect::Output>,
) -> (Value, Option<serde_json::Value>) {
    let mut value = None;
    for (name, variable) in output.map(|output| output.variables).unwrap_or_default() {
        context.insert(name, render::to_value(&variable));
        value = Some(variable);
    }
    (render::scope(context), value)
}

/// Renders the body of what `uri` names with `context` (see
/// [`body_context`]; templates run here), or its effect's `value`: a
/// string as it is, anything else as JSON.
fn render_body(
    catalog: &Catalog,
    uri: &str,
    found: &Found,
    context: &Value,
    value: Option<&serde_json::Value>,
) -> Result<ResourceBody, ReadError> {
    let value_text = |value: Option<&serde_json::Value>| match value {
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => "null".to_owned(),
    };
    match found {
        Found::Resource(idx) => {
            let resource = catalog.resources.get(*idx).ok_or(ReadError::NotFound)?;
            let contents = match &resource.body {
                Body::Template(template) => {
                    Contents::Text(render::render(&catalog.templates, template, context.clone())?)
                }
                Body::Value => Contents::Text(value_text(value)),
                Body::Bytes { bytes, text: true } => Contents::Text(String::from_utf8_lossy(bytes).into_owned()),
                Body::Bytes { bytes, text: false } => {
                    Contents::Blob(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            Ok(ResourceBody {
                uri: uri.to_owned(),
                mime_type: resource.mime_type.clone(),
                contents,
                meta: resource.meta.clone(),
            })
        }
        Found::Template(idx, _) => {
            let template = catalog.resource_templates.get(*idx).ok_or(ReadError::NotFound)?;
            let text = match &template.body {
                Some(body) => render::render(&catalog.templates, body, context.clone()).map_err(|err| match err {
                    RenderError::Failed(message) => ReadError::Rejected(message),
                    err => ReadError::Render(err),
                })?,
                None => value_text(value),
            };
            Ok(ResourceBody {
                uri: uri.to_owned(),
                mime_type: template.mime_type.clone(),
                contents: Contents::Text(text),
                meta: None,
            })
        }
    }
}
