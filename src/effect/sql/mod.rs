//! The `sql` effect: one statement with `:named` parameters on a named
//! database. It owns its keys (`databases:` entries and `run.sql`), their
//! load-time checks (`databases.rs`: URLs, timeouts, `setup` on a scratch
//! copy; here: each tool's statement, prepared on that copy) and its run
//! (the statement in a transaction that commits only once the result
//! rendered). `engine.rs` is the engine-neutral `Database` (`transact`,
//! `Probe`, `apply_setup`) over `sqlite.rs` and `postgres.rs` (with
//! `named.rs`, `:name` → `$n`, and `pg_values.rs`, JSON ↔ PostgreSQL types).

mod databases;
pub mod engine;
mod named;
mod pg_values;
mod postgres;
mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use databases::{Checked, DatabaseEntry, Declared, apply_setup, check_databases};
use engine::{Aborted, Database, MAX_ROWS, Probe, Refusal, Rows};

use super::{Check, Failure, Kind, Output, Sections};
use crate::diag::did_you_mean;
use crate::duration::DurationSpec;

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
    /// One statement; `:name` parameters are the tool's arguments.
    pub statement: String,
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
    /// Its `:params`, each an argument of the tool.
    params: Vec<String>,
}

impl Kind for Sql {
    const VARIABLES: &'static [&'static str] = &["rows", "truncated"];

    type Spec = SqlSpec;

    fn check(sql: &SqlSpec, sections: &Sections<'_>, check: &mut Check<'_>) -> Option<Sql> {
        let databases = sections.databases;
        let (Some(entry), Some(probe)) = (databases.entries.get(&sql.database), databases.probes.get(&sql.database))
        else {
            if databases.declared.contains(&sql.database) || (sections.left_out)("databases", &sql.database) {
                return None; // it failed to open or to read; that error is reported already
            }
            let known = &databases.declared;
            let hint = match did_you_mean(&sql.database, known.iter().map(String::as_str)) {
                Some(close) => format!("did you mean `{close}`?"),
                None if known.is_empty() => "declare it under `databases:` with a `url:`".to_owned(),
                None => format!("declared databases: {}", known.join(", ")),
            };
            check
                .error("unknown-database", "/run/sql/database", format!("database `{}` is not declared", sql.database))
                .hint = Some(hint);
            return None;
        };
        match probe.check(&sql.statement) {
            Ok(prepared) => {
                let mut ok = true;
                for param in &prepared.params {
                    if !check.arguments.contains(param) {
                        let hint = match did_you_mean(param, check.arguments.iter().map(String::as_str)) {
                            Some(close) => format!("did you mean `:{close}`?"),
                            None => format!("add `{param}` to `inputSchema.properties`"),
                        };
                        check
                            .error(
                                "sql-parameter",
                                "/run/sql/statement",
                                format!("statement uses `:{param}`, which is not an argument of this tool"),
                            )
                            .hint = Some(hint);
                        ok = false;
                    }
                }
                if entry.read_only && prepared.writes == Some(true) {
                    check
                        .error(
                            "sql-read-only",
                            "/run/sql/statement",
                            format!("statement writes, but database `{}` is `readOnly: true`", sql.database),
                        )
                        .hint = Some(
                        "use a statement that only reads, or declare another database entry without `readOnly`"
                            .to_owned(),
                    );
                    ok = false;
                }
                ok.then(|| Sql {
                    database: entry.database.clone(),
                    statement: sql.statement.clone(),
                    timeout: entry.timeout,
                    params: prepared.params,
                })
            }
            Err(Refusal { message, at }) => {
                let hint = if message.contains("positional") {
                    "name each parameter after a property of `inputSchema`, e.g. `WHERE id = :id`".to_owned()
                } else if message.contains("could not determine data type of parameter") {
                    "PostgreSQL cannot tell this parameter's type from where it is used: cast it, e.g. `:name::text`"
                        .to_owned()
                } else {
                    misspelt_name(&message, probe).map_or_else(
                        || {
                            "it is checked against the database after `setup` ran; check table and column names"
                                .to_owned()
                        },
                        |(kind, close)| format!("did you mean the {kind} `{close}`?"),
                    )
                };
                let message = format!("statement does not prepare against database `{}`: {message}", sql.database);
                let diagnostic = match at.or_else(|| unknown_name_at(&message, &sql.statement)) {
                    Some(range) => check.error_in("sql", ("/run/sql/statement", &sql.statement, range), message),
                    None => check.error("sql", "/run/sql/statement", message),
                };
                diagnostic.hint = Some(hint);
                None
            }
        }
    }

    fn arguments_used(&self) -> &[String] {
        &self.params
    }

    /// Runs the statement and `finish` in one transaction (see
    /// [`Database::transact`]): a write commits only if `finish` succeeded.
    async fn run<T, F, Fut>(&self, arguments: Map<String, Value>, finish: F) -> Result<T, Failure<T>>
    where
        F: FnOnce(Output) -> Fut,
        Fut: Future<Output = Result<T, T>>,
    {
        let outcome =
            self.database.transact(&self.statement, arguments, self.timeout, |rows| finish(output(rows))).await;
        outcome.map_err(|aborted| match aborted {
            Aborted::Refused { reason, rolled_back } => {
                Failure::Refused { reason, undone: rolled_back.then_some(ROLLED_BACK) }
            }
            Aborted::Statement(err) => Failure::Failed(err.to_string()),
        })
    }
}

/// What a `sql` result sees (`truncated`, then `rows`: the last one is the
/// effect's value), and a notice if rows were left out.
fn output(rows: Rows) -> Output {
    let notice = rows.truncated.then(|| {
        format!(
            "[carte: the statement returned more than {MAX_ROWS} rows; this result was made from the first {MAX_ROWS} only]"
        )
    });
    let truncated = ("truncated".to_owned(), Value::Bool(rows.truncated));
    let rows = ("rows".to_owned(), Value::Array(rows.rows.into_iter().map(Value::Object).collect()));
    Output { variables: vec![truncated, rows], notice }
}

/// The name SQLite's "no such column: x" or "no such table: x" probably
/// meant, among the database's columns or tables (a qualified `o.x` keeps
/// its qualifier).
/// Where the table or column SQLite did not find (`no such column: x`) is
/// written in `statement`: its first occurrence as a whole word.
fn unknown_name_at(message: &str, statement: &str) -> Option<std::ops::Range<usize>> {
    let (_, name) = unknown_name(message)?;
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
