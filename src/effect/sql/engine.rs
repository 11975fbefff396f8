//! The engine-neutral face of the `sql` effect: a [`Database`] is SQLite
//! (`sqlite.rs`) or PostgreSQL (`postgres.rs`), and the rest of carte sees
//! only this: [`Database::transact`] (statement → [`Rows`] → the caller's
//! `finish` → commit, or roll back), a [`Probe`] to check `setup` and
//! statements without side effects, and [`apply_setup`].

use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};

use super::{postgres, sqlite};
use crate::duration::show_duration;

/// The `timeout` of a database that declares none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `timeout` a database may declare.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Most rows of one statement a result template sees; more are dropped,
/// with `truncated` set and a notice in the result.
pub const MAX_ROWS: usize = 1000;

/// The most bytes of values (texts, blobs, about 8 per other value) one
/// statement hands to its result: rows past it are left out like rows past
/// [`MAX_ROWS`]. SQLite also refuses to build a single text or blob longer
/// than this (`SQLITE_LIMIT_LENGTH`: "string or blob too big").
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// PostgreSQL connections per database when `pool.max` is not given.
pub const DEFAULT_POOL: usize = 8;

/// Why a statement failed when a tool ran.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// A UNIQUE, NOT NULL, CHECK or FOREIGN KEY constraint refused the change.
    #[error("constraint failed: {0}")]
    Constraint(String),
    /// The statement ran longer than the database's `timeout` and was stopped.
    #[error("the statement ran longer than the database's timeout ({}) and was stopped; nothing was changed", show_duration(*.0))]
    Timeout(Duration),
    /// The call was cancelled; the statement was stopped.
    #[error("the call was cancelled; the statement was stopped")]
    Cancelled,
    /// The statement wrote, and its result was not ready by the time its
    /// transaction had to end: it was rolled back.
    #[error("the statement and its result took longer than the database's timeout ({}); the statement was rolled back and nothing was changed", show_duration(*.0))]
    Unfinished(Duration),
    /// The statement wrote, and its result failed: it was rolled back.
    #[error("the result failed, so the statement was rolled back; nothing was changed")]
    RolledBack,
    /// The database server could not be reached (the message names it).
    #[error("{0}")]
    Unreachable(String),
    /// An argument does not fit its parameter (the message names it).
    #[error("{0}")]
    Argument(String),
    /// Anything else the database reported.
    #[error("database error: {0}")]
    Other(String),
}

/// Why [`Database::transact`] returned no result.
#[derive(Debug)]
pub enum Aborted<E> {
    /// The statement failed, ran past its timeout (with its result), was
    /// cancelled, or could not commit: nothing was changed.
    Statement(SqlError),
    /// `finish` failed with this; if the statement wrote, it was rolled back.
    Refused {
        /// What `finish` returned.
        reason: E,
        /// Whether the statement had written (and was rolled back).
        rolled_back: bool,
    },
}

/// The rows a statement produced, at most [`MAX_ROWS`] of them holding at
/// most [`MAX_RESULT_BYTES`].
#[derive(Debug, Default)]
pub struct Rows {
    /// Column → value, in order.
    pub rows: Vec<Map<String, Value>>,
    /// Whether the statement had more rows than were kept.
    pub truncated: bool,
    /// Whether rows were left out for their bytes (not their count).
    pub over_bytes: bool,
    /// The bytes of the rows kept.
    pub bytes: usize,
    /// Whether the statement writes (it commits only if its result renders).
    pub wrote: bool,
}

impl Rows {
    /// Keeps `record` if there is room for it: `false` (and the rows marked
    /// truncated) once [`MAX_ROWS`] rows or [`MAX_RESULT_BYTES`] are reached,
    /// when reading should stop.
    pub fn keep(&mut self, record: Map<String, Value>) -> bool {
        let bytes = record.iter().map(|(column, value)| column.len() + value_bytes(value)).sum::<usize>();
        if self.rows.len() == MAX_ROWS || self.bytes + bytes > MAX_RESULT_BYTES {
            self.truncated = true;
            self.over_bytes = self.rows.len() < MAX_ROWS;
            return false;
        }
        self.bytes += bytes;
        self.rows.push(record);
        true
    }
}

/// About how many bytes `value` holds: its texts, and 8 per other value.
fn value_bytes(value: &Value) -> usize {
    match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(value_bytes).sum::<usize>() + 8,
        Value::Object(map) => map.iter().map(|(key, value)| key.len() + value_bytes(value)).sum::<usize>() + 8,
        _ => 8,
    }
}

/// Sets a call's cancel flag when dropped: the effect's future holds it, so
/// a call whose future is dropped (the client cancelled, the HTTP request
/// went away) stops its statement at the next progress check.
#[derive(Debug, Default)]
pub struct CancelOnDrop(pub Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Where a database URL points.
#[derive(Debug, Clone)]
pub enum Target {
    /// A SQLite file (`None`: in memory).
    Sqlite(Option<PathBuf>),
    /// A PostgreSQL server.
    Postgres(Box<postgres::Target>),
}

/// Reads a database URL: `sqlite:…` (relative paths resolved against
/// `base`) or `postgres://…`/`postgresql://…`.
pub fn parse_url(url: &str, base: &Path) -> Result<Target, String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return postgres::parse_target(url).map(|target| Target::Postgres(Box::new(target)));
    }
    sqlite::parse_url(url, base).map(Target::Sqlite)
}

/// A URL as it may be printed or logged: its password replaced by `***`.
pub fn redact_url(url: &str) -> String {
    postgres::redact(url)
}

/// How a database is declared besides its URL.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// PostgreSQL: most connections at once.
    pub pool_max: usize,
    /// Statements run in read-only transactions.
    pub read_only: bool,
}

/// One database of a catalog.
#[derive(Debug)]
pub enum Database {
    /// A SQLite file or in-memory database.
    Sqlite(Arc<sqlite::Database>),
    /// A PostgreSQL database, through a pool.
    Postgres(Box<postgres::Database>),
}

impl Database {
    /// A database at `target`, not opened yet: nothing is touched or connected.
    pub fn new(name: &str, target: Target, options: Options) -> Result<Database, String> {
        match target {
            Target::Sqlite(path) => sqlite::Database::new(path).map(|db| Database::Sqlite(Arc::new(db))),
            Target::Postgres(target) => postgres::Database::new(name, *target, options.pool_max, options.read_only)
                .map(|db| Database::Postgres(Box::new(db))),
        }
    }

    /// Whether this database, of the catalog being replaced, is the one
    /// `name` declares now (a reload keeps it: its open file, its pool).
    pub fn serves(&self, name: &str, target: &Target, options: Options) -> bool {
        match (self, target) {
            (Database::Sqlite(db), Target::Sqlite(path)) => db.path == *path,
            (Database::Postgres(db), Target::Postgres(target)) => {
                db.serves(name, target, options.pool_max, options.read_only)
            }
            _ => false,
        }
    }

    /// Its engine, as OpenTelemetry's `db.system.name` says it.
    pub fn system_name(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "sqlite",
            Database::Postgres(_) => "postgresql",
        }
    }

    /// Whether it is a file (SQLite) that any entry with its path may share.
    pub fn is_file(&self) -> bool {
        matches!(self, Database::Sqlite(db) if db.path.is_some())
    }

    /// The `setup` last committed on it (`None`: never).
    pub fn applied(&self) -> Option<Vec<String>> {
        match self {
            Database::Sqlite(db) => db.applied(),
            Database::Postgres(db) => db.applied(),
        }
    }

    /// A scratch place to run `setup` and prepare statements without
    /// changing anything: a copy of the SQLite schema, or a PostgreSQL
    /// transaction that is rolled back.
    pub fn probe(&self, timeout: Duration) -> Result<Probe, SqlFailure> {
        match self {
            Database::Sqlite(db) => db.probe(timeout).map(Probe::Sqlite).map_err(SqlFailure::from),
            Database::Postgres(db) => db.probe(timeout).map(Probe::Postgres),
        }
    }

    /// The migrations recorded in it as applied (name, SQL), in order,
    /// read without changing anything (PostgreSQL: through `probe`).
    pub fn recorded_migrations(&self, probe: &Probe) -> Result<Vec<(String, String)>, SqlFailure> {
        match (self, probe) {
            (Database::Postgres(_), Probe::Postgres(probe)) => probe.recorded_migrations(),
            (Database::Sqlite(db), _) => db.recorded_migrations().map_err(SqlFailure::from),
            (Database::Postgres(_), Probe::Sqlite(_)) => Ok(Vec::new()),
        }
    }

    /// The statements that record migration `name` (its `sql`) as applied,
    /// creating the table of them first if need be; the values are quoted
    /// as SQL string literals.
    pub fn record_migration(&self, name: &str, sql: &str) -> [String; 2] {
        let quote = |text: &str| format!("'{}'", text.replace('\'', "''"));
        let table = match self {
            Database::Sqlite(_) => {
                "CREATE TABLE IF NOT EXISTS carte_migrations (seq INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, \
                 sql TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            }
            Database::Postgres(_) => {
                "CREATE TABLE IF NOT EXISTS carte_migrations (seq bigserial PRIMARY KEY, name text NOT NULL UNIQUE, \
                 sql text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            }
        };
        [table.to_owned(), format!("INSERT INTO carte_migrations (name, sql) VALUES ({}, {})", quote(name), quote(sql))]
    }

    /// Serves from now on a scratch copy of this database, whose changes
    /// are thrown away (`carte test` takes a fresh one per example): a
    /// SQLite file's rows copied into memory; for PostgreSQL, one
    /// connection whose transaction is rolled back at the next rehearsal
    /// and when the database is dropped. `setup` has yet to run on it.
    pub fn rehearse(&self) -> Result<(), SqlFailure> {
        match self {
            Database::Sqlite(db) => db.rehearse().map_err(SqlFailure::from),
            Database::Postgres(db) => db.rehearse(),
        }
    }

    /// Whether it answers now: always for SQLite; PostgreSQL is asked (for
    /// `/readyz`), and the error names it, its `host:port` and why.
    pub async fn ready(&self) -> Result<(), String> {
        match self {
            Database::Sqlite(_) => Ok(()),
            Database::Postgres(db) => db.ready().await,
        }
    }

    /// Runs `statement` with `arguments` bound to its `:params`, and hands
    /// its rows to `finish` (rendering a tool's result), inside the
    /// statement's transaction: "statement → rows → finish → commit, or roll
    /// back".
    ///
    /// A statement that writes commits only once `finish` returned `Ok`;
    /// if `finish` fails, if the statement and `finish` together run past
    /// `timeout`, or if this future is dropped (the call was cancelled),
    /// the statement is rolled back and nothing was changed. The
    /// transaction is held while `finish` runs, so `finish` must never wait
    /// on a person or a client (steps that do run before the statement). A
    /// statement that writes nothing is committed before `finish` runs,
    /// which does not hold the database. Neither engine holds a runtime
    /// thread while it waits.
    pub async fn transact<T, E, F, Fut>(
        self: &Arc<Self>,
        statement: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        finish: F,
    ) -> Result<T, Aborted<E>>
    where
        F: FnOnce(Rows) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        match &**self {
            Database::Sqlite(db) => db.transact(statement, arguments, timeout, finish).await,
            Database::Postgres(db) => db.transact(statement, arguments, timeout, finish).await,
        }
    }
}

impl Database {
    /// Inserts `rows` into `table` (an example's rows, on a rehearsed
    /// database: see [`Database::rehearse`]), each row's values bound as
    /// parameters, never spliced; an error names the row that failed.
    pub async fn insert_rows(
        self: &Arc<Self>,
        table: &str,
        rows: &[Map<String, Value>],
        timeout: Duration,
    ) -> Result<(), String> {
        for (idx, row) in rows.iter().enumerate() {
            let (statement, values) = insert_statement(table, row);
            if let Database::Postgres(db) = &**self
                && db.rehearsing()
            {
                db.rehearse_insert(statement, values);
                continue;
            }
            let done = |_| std::future::ready(Ok::<(), String>(()));
            if let Err(Aborted::Statement(err)) = self.transact(&statement, values, timeout, done).await {
                return Err(format!("row {} of `{table}`: {err}", idx + 1));
            }
        }
        Ok(())
    }
}

/// `INSERT INTO "table" ("column", …) VALUES (:c0, …)` for `row`, and the
/// values by parameter name (a column's name may be anything SQL quotes).
fn insert_statement(table: &str, row: &Map<String, Value>) -> (String, Map<String, Value>) {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    if row.is_empty() {
        return (format!("INSERT INTO {} DEFAULT VALUES", quote(table)), Map::new());
    }
    let columns: Vec<String> = row.keys().map(|column| quote(column)).collect();
    let params: Vec<String> = (0..row.len()).map(|idx| format!(":c{idx}")).collect();
    let values = row.values().enumerate().map(|(idx, value)| (format!("c{idx}"), value.clone())).collect();
    let statement = format!("INSERT INTO {} ({}) VALUES ({})", quote(table), columns.join(", "), params.join(", "));
    (statement, values)
}

/// Where a catalog's `setup` runs and its statements are prepared while it
/// is checked; dropping it throws everything away.
pub enum Probe {
    /// A scratch in-memory copy of a SQLite schema.
    Sqlite(sqlite::Probe),
    /// A PostgreSQL transaction that is never committed.
    Postgres(postgres::Probe),
}

/// Why a statement does not prepare.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// What is wrong, in the database's words when it said.
    pub message: String,
    /// The byte range of the statement it points at, when it says.
    pub at: Option<Range<usize>>,
    /// What kind of mistake it is, for the hint.
    pub kind: RefusalKind,
}

/// What kind of mistake a [`Refusal`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A positional parameter (`?`, `$1`): parameters are named after arguments.
    Positional,
    /// PostgreSQL cannot tell a parameter's type from where it is used.
    UntypedParameter,
    /// Anything else the database said (a name, the syntax).
    Other,
}

impl Refusal {
    /// The database refused, with `message`.
    pub fn said(message: String) -> Refusal {
        Refusal { message, at: None, kind: RefusalKind::Other }
    }

    /// A positional parameter was written, as `message` says.
    pub fn positional(message: &str) -> Refusal {
        Refusal { message: message.to_owned(), at: None, kind: RefusalKind::Positional }
    }
}

/// A statement that prepared.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Its `:params`, in order.
    pub params: Vec<String>,
    /// Whether it writes, when the engine can tell before running it.
    pub writes: Option<bool>,
}

impl Probe {
    /// Runs one `setup` statement (or several, separated by `;`).
    pub fn run_setup(&mut self, statements: &str) -> Result<(), SqlFailure> {
        match self {
            Probe::Sqlite(probe) => probe.run_setup(statements),
            Probe::Postgres(probe) => probe.run_setup(statements),
        }
    }

    /// Prepares `statement` without running it.
    pub fn check(&self, statement: &str) -> Result<Prepared, Refusal> {
        match self {
            Probe::Sqlite(probe) => {
                probe.check(statement).map(|params| Prepared { params, writes: probe.writes(statement) })
            }
            Probe::Postgres(probe) => probe.check(statement).map(|params| Prepared { params, writes: None }),
        }
    }

    /// The tables and views, and every column of them, to suggest the name
    /// a statement meant.
    pub fn names(&self) -> (Vec<String>, Vec<String>) {
        match self {
            Probe::Sqlite(probe) => probe.names(),
            Probe::Postgres(probe) => probe.names(),
        }
    }
}

/// One database of an accepted catalog and the `setup` it declares.
pub struct SetupPlan<'a> {
    /// The database.
    pub database: &'a Database,
    /// Its `setup` statements, in order.
    pub statements: &'a [String],
    /// Its per-statement timeout.
    pub timeout: Duration,
}

/// What kind of failure an SQL error is, as far as a hint needs to know:
/// read once where the engine's error becomes carte's ([`SqlError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqlCause {
    /// The statement does not parse.
    Syntax,
    /// What it creates or inserts is there already (a table, a unique key).
    AlreadyThere,
    /// A table, column or function it names does not exist.
    Missing,
    /// The server refused the user or password.
    Login,
    /// The database named in the URL does not exist.
    NoSuchDatabase,
    /// Anything else.
    #[default]
    Other,
}

/// An SQL failure: what the engine said (in words, secrets left out) and
/// its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlFailure {
    /// Its kind.
    pub cause: SqlCause,
    /// What the engine said.
    pub message: String,
}

impl SqlFailure {
    /// `message`, a failure of no kind a hint speaks to.
    pub fn other(message: impl Into<String>) -> SqlFailure {
        SqlFailure { cause: SqlCause::Other, message: message.into() }
    }
}

impl From<String> for SqlFailure {
    fn from(message: String) -> SqlFailure {
        SqlFailure::other(message)
    }
}

impl std::fmt::Display for SqlFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why applying `setup` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupFailure {
    /// The index of the plan that failed.
    pub plan: usize,
    /// The index of the statement that failed (`None`: opening or committing).
    pub statement: Option<usize>,
    /// What went wrong.
    pub error: SqlFailure,
}

/// Opens the databases of an accepted catalog and runs each `setup` that
/// differs from the one last committed, in one transaction per database,
/// all committed only once every one succeeded (PostgreSQL's are held open
/// while SQLite's run, and committed last).
pub fn apply_setup(plans: &[SetupPlan<'_>]) -> Result<(), SetupFailure> {
    let mut pending: Vec<(usize, &postgres::Database, postgres::Probe)> = Vec::new();
    for (idx, plan) in plans.iter().enumerate() {
        let Database::Postgres(db) = plan.database else { continue };
        let db: &postgres::Database = db;
        if db.rehearsing() {
            db.rehearse_setup(plan.statements);
            continue;
        }
        if db.applied().as_deref() == Some(plan.statements)
            || pending.iter().any(|(_, seen, _)| std::ptr::eq(*seen, db))
        {
            continue;
        }
        let fail = |statement, error| SetupFailure { plan: idx, statement, error };
        let mut probe = db.setup_probe(plan.timeout).map_err(|error| fail(None, error))?;
        for (s_idx, statement) in plan.statements.iter().enumerate() {
            probe.run_setup(statement).map_err(|error| fail(Some(s_idx), error))?;
        }
        pending.push((idx, db, probe));
    }
    let sqlite: Vec<(usize, sqlite::SetupPlan<'_>)> = plans
        .iter()
        .enumerate()
        .filter_map(|(idx, plan)| match plan.database {
            Database::Sqlite(db) => {
                Some((idx, sqlite::SetupPlan { database: db, statements: plan.statements, timeout: plan.timeout }))
            }
            Database::Postgres(_) => None,
        })
        .collect();
    let (indices, sqlite): (Vec<usize>, Vec<sqlite::SetupPlan<'_>>) = sqlite.into_iter().unzip();
    sqlite::apply_setup(&sqlite)
        .map_err(|failure| SetupFailure { plan: indices.get(failure.plan).copied().unwrap_or(0), ..failure })?;
    for (idx, db, probe) in pending {
        probe.commit().map_err(|message| SetupFailure { plan: idx, statement: None, error: message.into() })?;
        db.setup_applied(plans[idx].statements);
    }
    Ok(())
}
