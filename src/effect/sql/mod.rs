//! The `sql` effect: one statement with `:named` parameters on a named
//! database. It owns its keys (`databases:` entries and `run.sql`), their
//! load-time checks (`databases.rs`: URLs, timeouts, `setup` on a scratch
//! copy; here: each tool's statement, prepared on that copy) and its run
//! (the statement in a transaction that commits only once the result
//! rendered; `params:` rendered first and bound beside the arguments).
//! `read.rs` is `sql:` on resources: the same statement check (see
//! [`prepare`]), read-only, run through the same `transact`. `engine.rs` is
//! the engine-neutral `Database` (`transact`, `Probe`, `apply_setup`) over
//! `sqlite.rs` and `postgres.rs` (with `named.rs`, `:name` → `$n`, and
//! `pg_values.rs`, JSON ↔ PostgreSQL types).

mod databases;
pub mod engine;
mod migrations;
mod named;
mod pg_values;
mod postgres;
mod read;
mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use databases::{DatabaseEntry, Databases, Declared};
use engine::{Aborted, Database, MAX_ROWS, Prepared, Probe, Refusal, RefusalKind, Rows};
pub use postgres::parse_target as parse_postgres_url;
pub use read::{Query, ReadSpec};

use super::{Call, Check, EffectError, Failure, Kind, Output, Reads, Sections, Template};
use crate::diag::{Diagnostic, did_you_mean};
use crate::duration::DurationSpec;
use crate::telemetry;
use tracing::Instrument as _;

/// A named database.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "database")]
pub struct DatabaseSpec {
    /// `sqlite:path/to/file.db` (relative to this file), `"sqlite::memory:"` (quoted: it ends in a
    /// colon) or `postgres://user:password@host:5432/name` (e.g. `${SHOP_DATABASE_URL}`; TLS is not
    /// supported yet: `sslmode=disable`; `connect_timeout=5` by default).
    pub url: String,
    /// Statements run in order, in one transaction, once the catalog is accepted (at start-up and
    /// on each reload that changes them); they must be idempotent (`CREATE TABLE IF NOT EXISTS …`).
    #[serde(default)]
    pub setup: Option<Statements>,
    /// How long one statement may run before it is stopped (`500ms`, `5s`, `1m`; default `5s`, at
    /// most `1h`). A cancelled call stops its statement too.
    #[serde(default)]
    pub timeout: Option<DurationSpec>,
    /// PostgreSQL: the connection pool (`max`: most connections at once, default 8). SQLite
    /// ignores it (one connection).
    #[serde(default)]
    pub pool: Option<PoolSpec>,
    /// `true`: statements run in read-only transactions (a statement that writes is refused:
    /// by `carte check` on SQLite, by PostgreSQL when it runs). Default `false`.
    #[serde(default, rename = "readOnly")]
    pub read_only: Option<bool>,
    /// Changes to the database applied once each, in order, after `setup`, and recorded in it
    /// (table `carte_migrations`): how a table evolves (`ALTER TABLE … ADD COLUMN …`). `carte
    /// check` tries the new ones on a scratch copy; a reload applies them before the new catalog
    /// serves. An applied migration may never change or vanish: write another one.
    #[serde(default)]
    pub migrations: Option<Vec<MigrationSpec>>,
}

/// One migration of a database.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "migration")]
pub struct MigrationSpec {
    /// Its name, unique in the database (`001-orders`, `002-phone`): how carte knows it was applied.
    pub name: String,
    /// Its SQL: one statement, or several separated by `;`.
    #[serde(default)]
    pub sql: Option<String>,
    /// A file holding its SQL instead (relative to this catalog file).
    #[serde(default)]
    pub file: Option<String>,
}

/// A PostgreSQL connection pool.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "connection pool")]
pub struct PoolSpec {
    /// Most connections open at once (default 8, at most 1000); calls beyond wait for one.
    #[serde(default)]
    pub max: Option<u64>,
}

/// One SQL statement or a list of them.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(title = "SQL statements")]
pub enum Statements {
    /// A single statement.
    One(String),
    /// Several statements, run in order.
    Many(Vec<String>),
}

impl Statements {
    /// The statements, however they were written.
    pub fn list(&self) -> Vec<&str> {
        match self {
            Statements::One(one) => vec![one.as_str()],
            Statements::Many(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// The `sql` effect.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "sql effect")]
pub struct SqlSpec {
    /// The name of a `databases` entry.
    pub database: String,
    /// One statement; `:name` parameters are the tool's arguments or names under `params`.
    pub statement: String,
    /// More `:name` parameters, each computed by a template from the arguments, `arguments` and
    /// `data` (`who: "{{ name | lower }}"`) and bound as a value, never spliced into the statement.
    /// A template that is one `{{ expression }}` keeps its JSON type (a number stays a number).
    #[serde(default)]
    pub params: Option<IndexMap<String, String>>,
}

/// Added to a failed result whose statement wrote: the model may retry
/// without fear of doing it twice.
pub const ROLLED_BACK: &str = "[carte: the result failed, so its statement was rolled back: nothing was changed]";

/// A tool's statement, prepared at load against its database.
pub struct Sql {
    /// The database it runs on.
    database: Arc<Database>,
    /// The statement, with `:named` parameters.
    statement: String,
    /// How long it may run.
    timeout: Duration,
    /// The name of its `databases` entry.
    database_name: String,
    /// Its `:params` that are arguments of the tool.
    params: Vec<String>,
    /// Its `params:` entries: each name and the template computing it.
    computed: Vec<(String, Template)>,
}

impl Kind for Sql {
    const VARIABLES: &'static [&'static str] = &["rows", "truncated"];
    const READS: Reads = Reads {
        does: "reads a database",
        when: "its rows are read",
        instead: "read the rows",
        output: "the rows",
        value: "the rows as JSON",
    };
    const VALUE_MIME: &'static str = "application/json";

    type Spec = SqlSpec;
    type ReadSpec = ReadSpec;
    type Read = Query;

    fn read_uses(query: &Query) -> &[String] {
        query.params()
    }

    fn check_read(spec: &ReadSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Query> {
        let variables = check.arguments;
        Query::check(spec, variables, sections, check)
    }

    async fn read(query: &Query, _call: &dyn Call, variables: Map<String, Value>) -> Result<Output, String> {
        let rows = query.rows(variables).await?;
        Ok(rows_output(rows, None))
    }

    fn watches(query: &Query) -> Option<&str> {
        Some(query.database())
    }

    fn check(sql: &SqlSpec, sections: &Sections, check: &mut Check<'_>) -> Option<Sql> {
        let computed = check_params(sql, check);
        let mut bindable: Vec<String> = check.arguments.to_vec();
        let names = sql.params.iter().flatten().map(|(name, _)| name);
        bindable.extend(names.filter(|name| !check.arguments.contains(name)).cloned());
        let what = if sql.params.is_some() {
            "an argument of this tool or a name under `params`"
        } else {
            "an argument of this tool"
        };
        let missing = |param: &str| {
            format!(
                "add `{param}` to `inputSchema.properties`, or compute it under `sql.params` (`{param}: \"{{{{ … }}}}\"`)"
            )
        };
        let bind = Bindable { names: &bindable, what, missing: &missing };
        let (entry, Prepared { params, writes }) =
            prepare(&sql.database, &sql.statement, "/run/sql", &bind, sections, check)?;
        if entry.read_only && writes == Some(true) {
            check
                .error(
                    "sql-read-only",
                    "/run/sql/statement",
                    format!("statement writes, but database `{}` is `readOnly: true`", sql.database),
                )
                .hint = Some(
                "use a statement that only reads, or declare another database entry without `readOnly`".to_owned(),
            );
            return None;
        }
        for (name, _) in sql.params.iter().flatten() {
            if !params.contains(name) && !check.arguments.contains(name) {
                let location = check.host.locate_key(&format!("/run/sql/params/{name}"));
                let message = format!("`params` computes `{name}`, but the statement never uses `:{name}`");
                check.host.report(Diagnostic::warning("sql-parameter", location, message)).hint =
                    Some(format!("use `:{name}` in the statement, or remove it from `params`"));
            }
        }
        let computed = computed?;
        Some(Sql {
            database: entry.database.clone(),
            statement: sql.statement.clone(),
            timeout: entry.timeout,
            database_name: sql.database.clone(),
            params: params.into_iter().filter(|param| check.arguments.contains(param)).collect(),
            computed,
        })
    }

    fn arguments_used(&self) -> &[String] {
        &self.params
    }

    /// Runs the statement and `finish` in one transaction (see
    /// [`Database::transact`]): a write commits only if `finish` succeeded.
    async fn run<T, F, Fut>(
        &self,
        call: &dyn Call,
        mut arguments: Map<String, Value>,
        finish: F,
    ) -> Result<T, Failure<T>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>,
    {
        if !self.computed.is_empty() {
            let templates: Vec<Template> = self.computed.iter().map(|(_, template)| template.clone()).collect();
            let values = call.render(&templates).await.map_err(Failure::render)?;
            // Bound as values: a param never becomes SQL text.
            for ((name, _), value) in self.computed.iter().zip(values) {
                arguments.insert(name.clone(), value);
            }
        }
        let span = tracing::info_span!(
            target: telemetry::TARGET,
            "sql",
            otel.name = self.database.system_name(),
            otel.kind = "client",
            db.system.name = self.database.system_name(),
        );
        let outcome = self
            .database
            .transact(&self.statement, arguments, self.timeout, |rows| finish(self.output(rows)))
            .instrument(span.clone())
            .await;
        outcome.map_err(|aborted| match aborted {
            Aborted::Refused { reason, rolled_back } => {
                telemetry::failed(&span, EffectError::Refused);
                Failure::Refused { reason, undone: rolled_back.then_some(ROLLED_BACK) }
            }
            Aborted::Statement(err) => Failure::of(&span, EffectError::Statement, err.to_string()),
        })
    }
}

impl Sql {
    /// What a `sql` result sees (see [`rows_output`]); a write changed this
    /// statement's database.
    fn output(&self, rows: Rows) -> Output {
        let changed = rows.wrote.then(|| self.database_name.clone());
        rows_output(rows, changed)
    }
}

/// What a statement's `rows` give a result or a resource's body
/// (`truncated`, then `rows`: the last one is the effect's value), with a
/// notice if rows were left out; `changed`: the database it wrote to.
fn rows_output(rows: Rows, changed: Option<String>) -> Output {
    let notice = rows.truncated.then(|| match rows.over_bytes {
        false => format!(
            "[carte: the statement returned more than {MAX_ROWS} rows; this result was made from the first {MAX_ROWS} only]"
        ),
        true => format!(
            "[carte: the statement's rows held more than {} MiB; this result was made from the first {} only]",
            engine::MAX_RESULT_BYTES >> 20,
            rows.rows.len()
        ),
    });
    let truncated = ("truncated".to_owned(), Value::Bool(rows.truncated));
    let rows = ("rows".to_owned(), Value::Array(rows.rows.into_iter().map(Value::Object).collect()));
    Output { variables: vec![truncated, rows], notice, changed }
}

/// The `params:` of a tool's statement, each registered as a template
/// (`None` once one was reported); a name that is also an argument is an
/// error: which value `:name` binds would be a guess.
fn check_params(sql: &SqlSpec, check: &mut Check<'_>) -> Option<Vec<(String, Template)>> {
    let mut computed = Vec::new();
    let mut ok = true;
    for (name, source) in sql.params.iter().flatten() {
        let pointer = format!("/run/sql/params/{name}");
        if check.arguments.contains(name) {
            let location = check.host.locate_key(&pointer);
            let message = format!("`params` computes `{name}`, which is also an argument of this tool");
            check.host.report(Diagnostic::error("sql-parameter", location, message)).hint = Some(format!(
                "`:{name}` would be ambiguous; give the computed value another name (e.g. `{name}_value`) and use that in the statement"
            ));
            ok = false;
            continue;
        }
        match check.template(&pointer, source) {
            Some(template) => computed.push((name.clone(), template)),
            None => ok = false,
        }
    }
    ok.then_some(computed)
}

/// The names a statement may bind as `:name`, what they are called in a
/// message, and the hint for a `:name` that is none of them.
pub(crate) struct Bindable<'a> {
    /// The names.
    pub names: &'a [String],
    /// "an argument of this tool", "a variable of the URI template".
    pub what: &'a str,
    /// The hint for `:param`, which is not one of them (and close to none).
    pub missing: &'a dyn Fn(&str) -> String,
}

/// Finds the `database` a statement written at `at` (`/run/sql`) runs on
/// and prepares `statement` against its scratch copy, reporting into
/// `check`: an unknown database (did you mean), a statement that does not
/// prepare (the unknown name underlined) or a `:param` not in `bind`.
/// Returns the database and the statement's `:params`.
pub(crate) fn prepare<'s>(
    database: &str,
    statement: &str,
    at: &str,
    bind: &Bindable<'_>,
    sections: &'s Sections,
    check: &mut Check<'_>,
) -> Option<(&'s DatabaseEntry, Prepared)> {
    let checked = &sections.databases;
    let databases = &checked.block;
    let (Some(entry), Some(probe)) = (databases.entries.get(database), databases.probes.get(database)) else {
        if checked.may_declare(database) {
            return None; // it failed to open or to read; that error is reported already
        }
        let known = &databases.declared;
        let hint = match did_you_mean(database, known.iter().map(String::as_str)) {
            Some(close) => format!("did you mean `{close}`?"),
            None if known.is_empty() => "declare it under `databases:` with a `url:`".to_owned(),
            None => format!("declared databases: {}", known.join(", ")),
        };
        check
            .error("unknown-database", &format!("{at}/database"), format!("database `{database}` is not declared"))
            .hint = Some(hint);
        return None;
    };
    let pointer = format!("{at}/statement");
    match probe.check(statement) {
        Ok(prepared) => {
            let mut ok = true;
            for param in &prepared.params {
                if !bind.names.contains(param) {
                    let hint = match did_you_mean(param, bind.names.iter().map(String::as_str)) {
                        Some(close) => format!("did you mean `:{close}`?"),
                        None => (bind.missing)(param),
                    };
                    let message = format!("statement uses `:{param}`, which is not {}", bind.what);
                    let written = format!(":{param}");
                    let diagnostic = match whole_word_at(&written, statement) {
                        Some(range) => check.error_in("sql-parameter", (&pointer, statement, range), message),
                        None => check.error("sql-parameter", &pointer, message),
                    };
                    diagnostic.hint = Some(hint);
                    ok = false;
                }
            }
            ok.then_some((entry, prepared))
        }
        Err(Refusal { message, at: place, kind }) => {
            let hint = match kind {
                RefusalKind::Positional => {
                    format!("name each parameter after {}, e.g. `WHERE id = :id`", bind.what)
                }
                RefusalKind::UntypedParameter => {
                    "PostgreSQL cannot tell this parameter's type from where it is used: cast it, e.g. `:name::text`"
                        .to_owned()
                }
                RefusalKind::Other => misspelt_name(&message, probe).map_or_else(
                    || "it is checked against the database after `setup` ran; check table and column names".to_owned(),
                    |(kind, close)| format!("did you mean the {kind} `{close}`?"),
                ),
            };
            let message = format!("statement does not prepare against database `{database}`: {message}");
            let diagnostic = match place.or_else(|| unknown_name_at(&message, statement)) {
                Some(range) => check.error_in("sql", (&pointer, statement, range), message),
                None => check.error("sql", &pointer, message),
            };
            diagnostic.hint = Some(hint);
            None
        }
    }
}

/// The name SQLite's "no such column: x" or "no such table: x" probably
/// meant, among the database's columns or tables (a qualified `o.x` keeps
/// its qualifier).
/// Where the table or column SQLite did not find (`no such column: x`) is
/// written in `statement`: its first occurrence as a whole word.
fn unknown_name_at(message: &str, statement: &str) -> Option<std::ops::Range<usize>> {
    let (_, name) = unknown_name(message)?;
    whole_word_at(name, statement)
}

/// The kind (`column`, `table`) and name in SQLite's "no such column: x"
/// or PostgreSQL's `column "x" does not exist` / `relation "x" does not exist`.
fn unknown_name(message: &str) -> Option<(&'static str, &str)> {
    if let Some((_, name)) = message.rsplit_once("no such column: ") {
        return Some(("column", name.trim()));
    }
    if let Some((_, name)) = message.rsplit_once("no such table: ") {
        return Some(("table", name.trim()));
    }
    let (head, _) = message.split_once(" does not exist")?;
    for (word, kind) in [("column ", "column"), ("relation ", "table")] {
        if let Some((_, name)) = head.rsplit_once(word) {
            return Some((kind, name.trim().trim_matches('"')));
        }
    }
    None
}

/// Where `name` is first written in `statement` as a whole word.
fn whole_word_at(name: &str, statement: &str) -> Option<std::ops::Range<usize>> {
    if name.is_empty() {
        return None;
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(found) = statement[from..].find(name) {
        let start = from + found;
        let end = start + name.len();
        let before = statement[..start].chars().next_back();
        let after = statement[end..].chars().next();
        if !before.is_some_and(is_word) && !after.is_some_and(is_word) {
            return Some(start..end);
        }
        from = end;
    }
    None
}

fn misspelt_name(message: &str, probe: &Probe) -> Option<(&'static str, String)> {
    let (kind, written) = unknown_name(message)?;
    let (tables, columns) = probe.names();
    let candidates = if kind == "column" { columns } else { tables };
    let (qualifier, name) = written.rsplit_once('.').map_or(("", written), |(q, n)| (q, n));
    let close = did_you_mean(name, candidates.iter().map(String::as_str))?;
    Some((kind, if qualifier.is_empty() { close.to_owned() } else { format!("{qualifier}.{close}") }))
}

#[cfg(test)]
mod tests {
    use super::unknown_name_at;

    #[test]
    fn the_unknown_name_is_found_as_a_whole_word() {
        let statement = "SELECT room_id, room FROM bookings WHERE room = :room";
        let at = unknown_name_at("statement does not prepare: no such column: room", statement);
        assert_eq!(at.clone().map(|r| &statement[r]), Some("room"));
        assert_eq!(at, Some(16..20), "not inside `room_id`");
        let at = unknown_name_at("no such table: members", "SELECT * FROM members");
        assert_eq!(at, Some(14..21));
        assert_eq!(unknown_name_at("near \"FORM\": syntax error", "SELECT * FORM t"), None);
        assert_eq!(unknown_name_at("no such column: gone", "SELECT 1"), None);
        let statement = "SELECT o.nme FROM orders o";
        let at = unknown_name_at(r#"column o.nme does not exist"#, statement).map(|r| &statement[r]);
        assert_eq!(at, Some("o.nme"));
        let at = unknown_name_at(r#"relation "ordrs" does not exist"#, "SELECT * FROM ordrs");
        assert_eq!(at, Some(14..19));
    }
}
