//! `sql:` on a resource or resource template: one read-only statement whose
//! rows a resource's body is made from. It is prepared at load like a
//! tool's (same diagnostics), must only read (a write is a load error), and
//! a template's `:params` are its URI's variables; it runs through
//! [`Database::transact`] like a tool's statement, so it is bounded by the
//! database's timeout, stopped when its read is dropped, and runs on every
//! engine that serves tools.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::engine::{Aborted, Database, Rows};
use super::{Bindable, prepare};
use crate::effect::{Check, Sections};

/// The `sql:` of a resource: a read-only statement on a named database.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "sql read")]
pub struct ReadSpec {
    /// The name of a `databases` entry.
    pub database: String,
    /// One statement that only reads (`SELECT …`); in a resource template, its `:name` parameters
    /// are the URI template's variables. Its rows are `rows` in the body template; without `text`
    /// or `template`, the body is the rows as JSON.
    pub statement: String,
}

/// A resource's statement, prepared at load against its database.
#[derive(Debug)]
pub struct Query {
    database: Arc<Database>,
    statement: String,
    timeout: Duration,
    /// The name of its `databases` entry.
    database_name: String,
    /// The URI variables it binds.
    params: Vec<String>,
}

impl Query {
    /// Checks the `sql:` written at `/sql` of a resource whose URI has
    /// `variables` (none for a fixed URI), reporting into `check`; `None`
    /// once it reported why it cannot run.
    pub fn check(spec: &ReadSpec, variables: &[String], sections: &Sections, check: &mut Check<'_>) -> Option<Query> {
        let fixed = |param: &str| {
            format!(
                "a resource with a fixed URI has nothing to bind; write the value into the statement, or move the entry to `resourceTemplates:` with `{{{param}}}` in its `uriTemplate`"
            )
        };
        let templated =
            |param: &str| format!("add `{{{param}}}` to the `uriTemplate`, or write the value into the statement");
        let bind = if variables.is_empty() {
            Bindable { names: variables, what: "a variable of this resource's URI (it has none)", missing: &fixed }
        } else {
            Bindable { names: variables, what: "a variable of the URI template", missing: &templated }
        };
        let (entry, prepared) = prepare(&spec.database, &spec.statement, "/sql", &bind, sections, check)?;
        // SQLite tells at load whether a statement writes; PostgreSQL's
        // statement that writes is rolled back when it runs (see `Query::rows`).
        if prepared.writes == Some(true) {
            let message = format!("a resource only reads, but this statement writes to database `{}`", spec.database);
            check.error("sql-write", "/sql/statement", message).hint = Some(
                "a resource is read again whenever a tool writes; make the change with a tool (`run: { sql: … }`) and read it here with a `SELECT`"
                    .to_owned(),
            );
            return None;
        }
        let params = prepared.params;
        Some(Query {
            database: entry.database.clone(),
            statement: spec.statement.clone(),
            timeout: entry.timeout,
            database_name: spec.database.clone(),
            params,
        })
    }

    /// The `databases` entry it reads.
    pub fn database(&self) -> &str {
        &self.database_name
    }

    /// The URI variables it binds.
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// Runs the statement with those of the URI's `variables` it binds as
    /// its `:params` (holding no runtime thread, bounded by the database's
    /// timeout, stopped if this future is dropped): its rows, or why it
    /// failed.
    pub async fn rows(&self, mut variables: Map<String, Value>) -> Result<Rows, String> {
        variables.retain(|name, _| self.params.contains(name));
        let read = self.database.transact(&self.statement, variables, self.timeout, |rows| async move {
            // A statement that wrote (PostgreSQL cannot tell before it runs)
            // is rolled back: a resource only reads.
            if rows.wrote { Err(WROTE) } else { Ok(rows) }
        });
        read.await.map_err(|aborted| match aborted {
            Aborted::Statement(err) => err.to_string(),
            Aborted::Refused { reason, .. } => reason.to_owned(),
        })
    }
}

/// Why a resource's statement that wrote gave no rows.
const WROTE: &str = "the statement writes, and a resource only reads: it was rolled back, nothing was changed";
