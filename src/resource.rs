//! Reading a resource by URI from a catalog snapshot: fixed resources first,
//! then resource templates (whose variables the body template sees). A
//! template's body that calls `fail()` rejects the URI: not found, with
//! its message. What a read produces, [`ResourceBody`], is defined here; content
//! blocks embed it (`content` depends on `resource`, never the reverse).
//!
//! A resource with `sql:` runs its statement when it is read
//! ([`read_found`]): matching and rendering run on the blocking pool, the
//! statement through the database's `transact` (holding no runtime thread,
//! bounded by the database's timeout), and its body template sees `rows`
//! and `truncated` (without a template, the body is the rows as JSON).
//! [`read`], for callers that cannot wait (a resource embedded in a result
//! that renders on the blocking pool, the reload diff), reads every other
//! resource and refuses those.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use minijinja::Value;
use serde_json::Map;

use crate::catalog::{Body, Catalog, Step};
use crate::effect::sql::Query;
use crate::effect::sql::engine::Rows;
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
    /// Its `sql` statement failed (or ran past the database's timeout).
    #[error("its statement failed: {0}")]
    Query(String),
    /// It reads a database, which this caller cannot wait for ([`read`]).
    #[error("it reads a database when it is read, so it cannot be embedded; link it with `resource_link` instead")]
    Live,
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
    /// The statement the resource reads with, if any.
    pub fn query<'c>(&self, catalog: &'c Catalog) -> Option<&'c Query> {
        match self {
            Found::Resource(idx) => catalog.resources.get(*idx)?.sql.as_ref(),
            Found::Template(idx, _) => catalog.resource_templates.get(*idx)?.sql.as_ref(),
        }
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

/// The database the resource at `uri` reads, if it reads one.
pub fn database_of<'c>(catalog: &'c Catalog, uri: &str) -> Option<&'c str> {
    find(catalog, uri).ok()?.query(catalog).map(Query::database)
}

/// Reads the resource at `uri`, blocking; one that reads a database is
/// [`ReadError::Live`] (see [`read_found`]).
pub fn read(catalog: &Catalog, uri: &str) -> Result<ResourceBody, ReadError> {
    let found = find(catalog, uri)?;
    if found.query(catalog).is_some() {
        return Err(ReadError::Live);
    }
    if !found.steps(catalog).is_empty() {
        return Err(ReadError::Steps);
    }
    let (context, rows) = body_context(base_context(catalog, uri, &found), None);
    render_body(catalog, uri, &found, &context, rows.as_ref())
}

/// Reads what `uri` names (`found`) with `context` (see [`base_context`],
/// plus what its steps produced): its statement, then its body, inline
/// first (see [`render::inline`]), in `caller`'s turn of the render pool if
/// it does not fit.
pub async fn read_found(
    catalog: &Arc<Catalog>,
    uri: &str,
    found: Found,
    context: BTreeMap<String, Value>,
    caller: &(dyn Fn() -> render::Caller + Sync),
) -> Result<ResourceBody, ReadError> {
    let rows = match found.query(catalog) {
        Some(query) => {
            let variables = match &found {
                Found::Template(_, variables) => variables
                    .iter()
                    .filter(|(name, _)| query.params().contains(name))
                    .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
                    .collect(),
                Found::Resource(_) => Map::new(),
            };
            Some(query.rows(variables).await.map_err(ReadError::Query)?)
        }
        None => None,
    };
    let (context, rows) = body_context(context, rows);
    if let Some(body) = render::inline(|| render_body(catalog, uri, &found, &context, rows.as_ref())) {
        return body;
    }
    let (owned, owned_uri) = (Arc::clone(catalog), uri.to_owned());
    render::pooled(caller(), move || render_body(&owned, &owned_uri, &found, &context, rows.as_ref())).await?
}

/// What a resource's templates see before its statement runs: the URI's
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

/// What a body's templates see: `context`, and the statement's `rows` (and
/// `truncated`) if it has one; the rows as JSON, for a body that is them.
fn body_context(mut context: BTreeMap<String, Value>, rows: Option<Rows>) -> (Value, Option<serde_json::Value>) {
    let mut json_rows = None;
    if let Some(rows) = rows {
        let list = serde_json::Value::Array(rows.rows.into_iter().map(serde_json::Value::Object).collect());
        context.insert("rows".to_owned(), render::to_value(&list));
        context.insert("truncated".to_owned(), Value::from(rows.truncated));
        json_rows = Some(list);
    }
    (render::scope(context), json_rows)
}

/// Renders the body of what `uri` names with `context` (see
/// [`body_context`]; templates run here), or its statement's `rows`.
fn render_body(
    catalog: &Catalog,
    uri: &str,
    found: &Found,
    context: &Value,
    json_rows: Option<&serde_json::Value>,
) -> Result<ResourceBody, ReadError> {
    let rows_text = |rows: Option<&serde_json::Value>| rows.unwrap_or(&serde_json::Value::Null).to_string();
    match found {
        Found::Resource(idx) => {
            let resource = catalog.resources.get(*idx).ok_or(ReadError::NotFound)?;
            let contents = match &resource.body {
                Body::Template(template) => {
                    Contents::Text(render::render(&catalog.templates, template, context.clone())?)
                }
                Body::Rows => Contents::Text(rows_text(json_rows)),
                Body::Bytes { bytes, text: true } => Contents::Text(String::from_utf8_lossy(bytes).into_owned()),
                Body::Bytes { bytes, text: false } => {
                    Contents::Blob(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            Ok(ResourceBody { uri: uri.to_owned(), mime_type: resource.mime_type.clone(), contents })
        }
        Found::Template(idx, _) => {
            let template = catalog.resource_templates.get(*idx).ok_or(ReadError::NotFound)?;
            let text = match &template.body {
                Some(body) => render::render(&catalog.templates, body, context.clone()).map_err(|err| match err {
                    RenderError::Failed(message) => ReadError::Rejected(message),
                    err => ReadError::Render(err),
                })?,
                None => rows_text(json_rows),
            };
            Ok(ResourceBody {
                uri: uri.to_owned(),
                mime_type: template.mime_type.clone(),
                contents: Contents::Text(text),
            })
        }
    }
}
