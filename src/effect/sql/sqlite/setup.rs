//! Loading without side effects, and `setup` once a catalog is accepted:
//! [`Probe`] (a scratch copy of a database's schema where `setup` runs and
//! statements are prepared inside a transaction never committed) and
//! [`apply_setup`] (the real databases, one transaction per database,
//! committed only if every setup succeeded).

use std::path::Path;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};

use super::{Database, bounded, lock};
use crate::duration::show_duration;
use crate::effect::sql::engine::{Refusal, SetupFailure, SqlCause, SqlFailure};

/// A scratch copy of a database's schema inside a transaction that is never
/// committed, on which a catalog's `setup` runs and its statements are
/// prepared. Dropping it throws everything away.
pub struct Probe {
    connection: Connection,
    timeout: Duration,
}

impl Probe {
    pub(super) fn new(schema: &[String], timeout: Duration) -> rusqlite::Result<Probe> {
        let connection = Connection::open_in_memory()?;
        // `ATTACH 'file'` would create a file: not while checking.
        connection.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
        limit_lengths(&connection)?;
        // Tables first, then what depends on them; what cannot be copied (a
        // virtual table of a module this build lacks) is left out, and the
        // statements that use it are reported when they fail to prepare.
        let mut pending: Vec<&String> = schema.iter().collect();
        loop {
            let before = pending.len();
            pending.retain(|sql| connection.execute_batch(sql).is_err());
            if pending.is_empty() || pending.len() == before {
                break;
            }
        }
        if !pending.is_empty() {
            tracing::debug!("{} schema entries could not be copied for checking", pending.len());
        }
        connection.execute_batch("BEGIN")?;
        Ok(Probe { connection, timeout })
    }

    /// Runs one `setup` statement (or several, separated by `;`), bounded by
    /// the database's timeout.
    pub fn run_setup(&mut self, statements: &str) -> Result<(), SqlFailure> {
        bounded(&mut self.connection, Instant::now() + self.timeout, None, |connection| {
            connection.execute_batch(statements)
        })
        .map_err(|err| setup_error(&err, self.timeout, statements))
    }

    /// Prepares `statement` without running it: the names of its `:params`,
    /// or SQLite's complaint (a wrong column or table name, a syntax error).
    pub fn check(&self, statement: &str) -> Result<Vec<String>, Refusal> {
        let prepared = self
            .connection
            .prepare(statement)
            .map_err(|err| Refusal::said(tidy_message(&err.to_string(), statement)))?;
        let mut names = Vec::new();
        for idx in 1..=prepared.parameter_count() {
            match prepared.parameter_name(idx) {
                Some(name) if name.starts_with([':', '@', '$']) => names.push(name[1..].to_owned()),
                Some(name) => names.push(name.to_owned()),
                None => return Err(Refusal::positional("positional `?` parameters are not supported; use `:name`")),
            }
        }
        Ok(names)
    }

    /// Whether `statement` writes (SQLite's `sqlite3_stmt_readonly`).
    pub fn writes(&self, statement: &str) -> Option<bool> {
        self.connection.prepare(statement).ok().map(|prepared| !prepared.readonly())
    }

    /// The tables and views of this database, and every column of them
    /// (each name once), to suggest the name a statement meant.
    pub fn names(&self) -> (Vec<String>, Vec<String>) {
        let strings = |sql: &str, param: Option<&str>| -> Vec<String> {
            let Ok(mut statement) = self.connection.prepare(sql) else { return Vec::new() };
            let params: Vec<&dyn rusqlite::ToSql> = param.iter().map(|p| p as &dyn rusqlite::ToSql).collect();
            statement
                .query_map(params.as_slice(), |row| row.get::<_, String>(0))
                .map(|rows| rows.filter_map(Result::ok).collect())
                .unwrap_or_default()
        };
        let tables = strings("SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') ORDER BY name", None);
        let mut columns: Vec<String> = Vec::new();
        for table in &tables {
            for column in strings("SELECT name FROM pragma_table_info(?1)", Some(table)) {
                if !columns.contains(&column) {
                    columns.push(column);
                }
            }
        }
        (tables, columns)
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

/// Opens the databases of an accepted catalog (creating their files) and
/// runs each `setup` that differs from the one last committed, in one
/// transaction per database; the transactions are committed only once every
/// setup succeeded. On failure nothing is committed, and a file this call
/// created is removed again.
pub fn apply_setup(plans: &[SetupPlan<'_>]) -> Result<(), SetupFailure> {
    let mut pending: Vec<Pending<'_>> = Vec::new();
    let mut seen: Vec<&Database> = Vec::new();
    for (idx, plan) in plans.iter().enumerate() {
        // The same database twice would wait for its own lock.
        if seen.iter().any(|db| std::ptr::eq(*db, plan.database)) {
            continue;
        }
        seen.push(plan.database);
        let fail = |statement, message: String| SetupFailure { plan: idx, statement, error: message.into() };
        let mut guard = lock(&plan.database.connection);
        let mut created = false;
        if guard.is_none() {
            created = plan.database.path.as_deref().is_some_and(|path| !path.exists());
            let connection = open(plan.database.path.as_deref(), created).map_err(|err| fail(None, err));
            if connection.is_err() && created {
                remove_files(plan.database.path.as_deref());
            }
            *guard = Some(connection?);
        }
        let mut entry = Pending {
            plan: idx,
            guard,
            database: plan.database,
            statements: plan.statements,
            created,
            begun: false,
            relaxed: false,
        };
        if plan.database.applied().as_deref() == Some(plan.statements) {
            continue;
        }
        let Some(connection) = entry.guard.as_mut() else { continue };
        connection.execute_batch(SETUP_SYNC).map_err(|err| fail(None, err.to_string()))?;
        entry.relaxed = true;
        connection.execute_batch("BEGIN IMMEDIATE").map_err(|err| fail(None, err.to_string()))?;
        entry.begun = true;
        for (s_idx, statement) in plan.statements.iter().enumerate() {
            bounded(connection, Instant::now() + plan.timeout, None, |connection| connection.execute_batch(statement))
                .map_err(|err| SetupFailure {
                    plan: idx,
                    statement: Some(s_idx),
                    error: setup_error(&err, plan.timeout, statement),
                })?;
        }
        pending.push(entry);
    }
    for mut entry in pending {
        entry.commit().map_err(|message| SetupFailure { plan: entry.plan, statement: None, error: message.into() })?;
    }
    Ok(())
}

/// `setup` (with the new migrations) is committed without waiting for the
/// disk: it runs again at every start, so a power cut that loses its commit
/// loses nothing the next start does not do again. In WAL mode `NORMAL` keeps
/// the database consistent (the commit is whole or absent, never half), and
/// the first commit a client's call makes with [`SERVING_SYNC`] syncs the log
/// up to it, setup's frames with it. A new database's start then waits for
/// two `fsync`s instead of four: SQLite still syncs the new log's header and
/// its folder, no longer the commit (nor, see [`open`], the empty file's
/// first page).
const SETUP_SYNC: &str = "PRAGMA synchronous = NORMAL";

/// SQLite's default, with which every call's commit is on disk before it
/// answers.
const SERVING_SYNC: &str = "PRAGMA synchronous = FULL";

/// A database whose setup ran in a transaction not yet committed; dropped
/// uncommitted, it rolls back (and removes a file it created).
struct Pending<'a> {
    plan: usize,
    guard: MutexGuard<'a, Option<Connection>>,
    database: &'a Database,
    statements: &'a [String],
    created: bool,
    begun: bool,
    /// Committing without waiting for the disk ([`SETUP_SYNC`]) until
    /// committed or rolled back.
    relaxed: bool,
}

impl Pending<'_> {
    fn commit(&mut self) -> Result<(), String> {
        if let Some(connection) = self.guard.as_mut()
            && self.begun
        {
            connection.execute_batch("COMMIT").map_err(|err| err.to_string())?;
        }
        self.begun = false;
        if let Some(connection) = self.guard.as_mut()
            && self.relaxed
        {
            connection.execute_batch(SERVING_SYNC).map_err(|err| err.to_string())?;
        }
        self.relaxed = false;
        self.created = false;
        *lock(&self.database.applied) = Some(self.statements.to_vec());
        Ok(())
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.begun
            && let Some(connection) = self.guard.as_mut()
            && let Err(err) = connection.execute_batch("ROLLBACK")
        {
            tracing::warn!("rolling back a failed setup: {err}");
        }
        if self.relaxed
            && let Some(connection) = self.guard.as_mut()
            && let Err(err) = connection.execute_batch(SERVING_SYNC)
        {
            tracing::warn!("syncing fully again after a failed setup: {err}");
        }
        if self.created {
            *self.guard = None;
            remove_files(self.database.path.as_deref());
        }
    }
}

/// Opens a database to serve it: read-write, created if missing, in WAL
/// mode (readers proceed while a writer commits).
///
/// Switching a database to WAL writes its header in a transaction of the
/// old journal mode. For a file this process has just `created` (empty:
/// nothing to roll back to) that transaction runs without a journal: one
/// write and one `fsync` instead of creating, syncing twice, and deleting a
/// `-journal` file and syncing the folder — a third of a new database's
/// start-up — and without waiting for the disk: a crash in that one write
/// leaves an empty database unreadable, never data lost (there is none yet).
/// `setup` itself runs in WAL mode with [`SETUP_SYNC`], every later
/// transaction with SQLite's full syncing.
pub(super) fn open(path: Option<&Path>, created: bool) -> Result<Connection, String> {
    let connection = match path {
        Some(path) => Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ),
        None => Connection::open_in_memory(),
    }
    .map_err(|err| err.to_string())?;
    limit_lengths(&connection).map_err(|err| err.to_string())?;
    if path.is_some() {
        let mode = |mode: &str| -> Result<String, String> {
            connection
                .query_row(&format!("PRAGMA journal_mode={mode}"), [], |row| row.get(0))
                .map_err(|err| err.to_string())
        };
        if created {
            connection.execute_batch("PRAGMA synchronous = OFF").map_err(|err| err.to_string())?;
            mode("OFF")?;
        }
        mode("WAL")?;
        if created {
            connection.execute_batch(SERVING_SYNC).map_err(|err| err.to_string())?;
        }
    }
    Ok(connection)
}

/// No text or blob longer than a statement's result may hold: SQLite
/// refuses to build one ("string or blob too big") instead of allocating
/// it (`hex(zeroblob(:n))` with a client's `n`), and no row or statement
/// larger than that either.
pub(super) fn limit_lengths(connection: &Connection) -> rusqlite::Result<()> {
    let most = i32::try_from(super::super::engine::MAX_RESULT_BYTES).unwrap_or(i32::MAX);
    connection.set_limit(Limit::SQLITE_LIMIT_LENGTH, most)?;
    Ok(())
}

/// Removes a database file this process created, with its WAL files.
pub(super) fn remove_files(path: Option<&Path>) {
    let Some(path) = path else { return };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// Opens an existing database file for reading its schema, changing nothing
/// on disk. Without a `-wal` file beside it, as `immutable` (no lock, no
/// journal, no `-wal`/`-shm` created — a plain read-only open of a WAL-mode
/// database creates both); with one (a server is writing it), through that
/// log.
pub(super) fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match path.to_str() {
        Some(text) if !Path::new(&wal).exists() => {
            let mut uri = String::from("file:");
            for c in text.chars() {
                match c {
                    '%' => uri.push_str("%25"),
                    '?' => uri.push_str("%3f"),
                    '#' => uri.push_str("%23"),
                    c => uri.push(c),
                }
            }
            uri.push_str("?immutable=1");
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
        }
        _ => Connection::open_with_flags(path, flags),
    }
}

/// The SQL of every table, index, view and trigger, in creation order,
/// without SQLite's own objects and the shadow tables of virtual tables
/// (which re-creating the virtual table creates).
pub(super) fn read_schema(connection: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = connection.prepare(
        "SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
         AND tbl_name NOT IN (SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow') \
         ORDER BY rowid",
    )?;
    statement.query_map([], |row| row.get(0))?.collect()
}

/// SQLite repeats the whole statement in its messages (`… in SELECT … at
/// offset 7`); the diagnostic already points at it.
fn tidy_message(message: &str, statement: &str) -> String {
    let head: String = statement.trim_start().chars().take(12).collect();
    match message.find(&format!(" in {head}")) {
        Some(idx) if !head.is_empty() => message[..idx].to_owned(),
        _ => message.to_owned(),
    }
}

/// Why a `setup` statement failed, in words.
fn setup_error(err: &rusqlite::Error, timeout: Duration, statement: &str) -> SqlFailure {
    match err {
        rusqlite::Error::SqliteFailure(code, _) if code.code == rusqlite::ErrorCode::OperationInterrupted => {
            SqlFailure::other(format!("it ran longer than the database's timeout ({})", show_duration(timeout)))
        }
        _ => SqlFailure { cause: cause(err), message: tidy_message(&err.to_string(), statement) },
    }
}

/// The kind of `err`. SQLite gives one code (`SQLITE_ERROR`) for a syntax
/// error, a missing table and one that exists, and tells them apart only in
/// its message: this is the one place that reads it.
fn cause(err: &rusqlite::Error) -> SqlCause {
    let unique = [rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE, rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY];
    if err.sqlite_error().is_some_and(|code| unique.contains(&code.extended_code)) {
        return SqlCause::AlreadyThere;
    }
    let message = err.to_string();
    let says = |words: &[&str]| words.iter().any(|word| message.contains(word));
    if says(&["syntax error", "incomplete input", "unrecognized token"]) {
        SqlCause::Syntax
    } else if says(&["already exists"]) {
        SqlCause::AlreadyThere
    } else if says(&["no such"]) {
        SqlCause::Missing
    } else {
        SqlCause::Other
    }
}
