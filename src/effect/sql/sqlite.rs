//! SQLite, one engine of the `sql` effect (see `engine.rs`): checking a catalog's `setup`
//! and statements without side effects, applying `setup` once a catalog is
//! accepted, and running one statement with `:named` parameters in a
//! transaction, bounded in time and rows.
//!
//! Loading a catalog never changes a database (`sqlite/setup.rs`). [`Database::probe`] copies
//! the schema of the database (read-only, or from the open connection on a
//! reload) into a scratch in-memory database, opens a transaction there,
//! runs `setup` and prepares every statement; the scratch is thrown away
//! with its transaction never committed. Only when the whole catalog is
//! accepted does [`apply_setup`] open the real database (creating the file)
//! and run `setup` in one transaction per database, committed only if every
//! database's setup succeeded.
//!
//! A tool call runs its statement through [`Database::transact`]:
//! statement → rows → the caller renders its result → commit, or roll back
//! if the result failed, ran past the timeout or the call was cancelled. A
//! statement that writes nothing commits before its result renders, so a
//! read never holds the database while a template runs. rusqlite is
//! synchronous: the statement runs on the blocking pool and the render is
//! awaited on the async side, so neither a slow query nor a waiting
//! transaction stalls other requests. A statement is stopped by SQLite's
//! progress handler when it runs past its timeout or when its call is
//! cancelled (see [`CancelOnDrop`]), and at most [`MAX_ROWS`](super::engine::MAX_ROWS) rows holding at
//! most [`MAX_RESULT_BYTES`](super::engine::MAX_RESULT_BYTES) are read from it;
//! SQLite builds no text or blob longer than that (`SQLITE_LIMIT_LENGTH`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

use base64::Engine as _;
use rusqlite::Connection;
use rusqlite::types::{Value as SqlValue, ValueRef};
use serde_json::{Map, Value};

use super::engine::{Aborted, CancelOnDrop, Rows, SqlError};

mod setup;
pub use setup::{Probe, SetupPlan, apply_setup};
use setup::{open_read_only, read_schema};

/// SQLite virtual-machine instructions between two looks at the clock and
/// the cancel flag (a few microseconds of work).
const PROGRESS_OPS: i32 = 1000;

/// One database of a catalog. It is opened (and its file created) only by
/// [`apply_setup`], once a catalog using it is accepted; a reload that keeps
/// the same URL keeps the same `Database`, open, with its rows.
#[derive(Debug)]
pub struct Database {
    /// Where it lives (`None` for `sqlite::memory:`).
    pub path: Option<PathBuf>,
    /// `None` until a catalog using it is accepted.
    connection: Mutex<Option<Connection>>,
    /// The `setup` last committed on it (`None`: never), so that a reload
    /// runs `setup` again only if it changed.
    applied: Mutex<Option<Vec<String>>>,
    /// One tool call at a time uses the connection: [`Database::transact`]
    /// waits for its turn here, holding no thread, before it takes one.
    turn: Arc<tokio::sync::Semaphore>,
}

/// Where a `sqlite:` URL points, relative paths resolved against `base`.
pub fn parse_url(url: &str, base: &Path) -> Result<Option<PathBuf>, String> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(format!(
            "unsupported database URL scheme `{scheme}:`; use `sqlite:path/to/file.db`, `sqlite::memory:` or `postgres://user@host:5432/name`"
        ));
    };
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let rest = rest.split('?').next().unwrap_or_default();
    if rest == ":memory:" {
        return Ok(None);
    }
    if rest.is_empty() {
        return Err("the database URL has no path; write `sqlite:file.db`".to_owned());
    }
    let path = Path::new(rest);
    Ok(Some(if path.is_absolute() { path.to_path_buf() } else { base.join(path) }))
}

impl Database {
    /// A database at `path` (`None`: in memory), not opened yet: nothing
    /// on disk is touched. Its folder must exist.
    pub fn new(path: Option<PathBuf>) -> Result<Database, String> {
        if let Some(parent) = path.as_deref().and_then(Path::parent)
            && !parent.as_os_str().is_empty()
            && !parent.is_dir()
        {
            return Err(format!("folder `{}` does not exist", parent.display()));
        }
        Ok(Database {
            path,
            connection: Mutex::default(),
            applied: Mutex::default(),
            turn: Arc::new(tokio::sync::Semaphore::new(1)),
        })
    }

    /// The `setup` last committed on this database (`None`: never).
    pub fn applied(&self) -> Option<Vec<String>> {
        lock(&self.applied).clone()
    }

    /// The migrations recorded as applied (name, SQL), in order: read from
    /// the open connection (a reload) or the file, changing nothing; none
    /// if there is neither, or no table of them yet.
    pub fn recorded_migrations(&self) -> Result<Vec<(String, String)>, String> {
        let read = |connection: &Connection| -> rusqlite::Result<Vec<(String, String)>> {
            let there: bool = connection.query_row(
                "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'carte_migrations'",
                [],
                |row| row.get(0),
            )?;
            if !there {
                return Ok(Vec::new());
            }
            let mut statement = connection.prepare("SELECT name, sql FROM carte_migrations ORDER BY seq")?;
            statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?.collect()
        };
        let connection = lock(&self.connection);
        match (connection.as_ref(), &self.path) {
            (Some(open), _) => read(open),
            (None, Some(path)) if path.exists() => open_read_only(path).and_then(|c| read(&c)),
            (None, _) => Ok(Vec::new()),
        }
        .map_err(|err| err.to_string())
    }

    /// Serves from now on a scratch in-memory copy of this database (its
    /// schema and rows, read without changing the file; empty if there is
    /// none), on which `setup` has yet to run: `carte test` runs each
    /// example on a fresh one. Nothing on disk is touched.
    pub fn rehearse(&self) -> Result<(), String> {
        let mut scratch = Connection::open_in_memory().map_err(|err| err.to_string())?;
        setup::limit_lengths(&scratch).map_err(|err| err.to_string())?;
        if let Some(path) = self.path.as_deref().filter(|path| path.exists()) {
            let source = open_read_only(path).map_err(|err| format!("cannot read `{}`: {err}", path.display()))?;
            let copy = rusqlite::backup::Backup::new(&source, &mut scratch).map_err(|err| err.to_string())?;
            copy.run_to_completion(1024, Duration::ZERO, None)
                .map_err(|err| format!("cannot copy `{}`: {err}", path.display()))?;
        }
        *lock(&self.connection) = Some(scratch);
        *lock(&self.applied) = None;
        Ok(())
    }

    /// A scratch in-memory copy of this database's schema, to try a
    /// catalog's `setup` and statements on without changing anything: the
    /// open connection's schema if there is one (a reload), else the file's,
    /// read without writing, locking or creating anything, else none.
    pub fn probe(&self, timeout: Duration) -> Result<Probe, String> {
        let schema = {
            let connection = lock(&self.connection);
            match (connection.as_ref(), &self.path) {
                (Some(open), _) => read_schema(open),
                (None, Some(path)) if path.exists() => open_read_only(path).and_then(|c| read_schema(&c)),
                (None, _) => Ok(Vec::new()),
            }
        }
        .map_err(|err| err.to_string())?;
        Probe::new(&schema, timeout).map_err(|err| err.to_string())
    }

    /// Runs `statement` with `arguments` bound to its `:params`, in a
    /// transaction, and returns the first rows it produced ([`Rows::keep`])
    /// (column → value), committed. It is stopped after `timeout`, or as soon
    /// as `cancel` is set; a stopped statement changes nothing.
    pub fn execute(
        &self,
        statement: &str,
        arguments: &Map<String, Value>,
        timeout: Duration,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Rows, SqlError> {
        let mut kept = None;
        self.execute_then(statement, arguments, timeout, cancel, |rows, _| {
            kept = Some(rows);
            Ok(())
        })?;
        Ok(kept.unwrap_or_default())
    }

    /// Runs `statement` like [`Database::execute`], then hands its rows to
    /// `decide`. If the statement changed something, `decide` runs inside
    /// its transaction, with the deadline by which the transaction must end
    /// (`timeout` after the statement began): the transaction commits only
    /// if `decide` returns `Ok`, and an `Err` rolls it back and is returned.
    /// A statement that writes nothing (SQLite's `sqlite3_stmt_readonly`)
    /// is committed first, and `decide` gets no deadline: nothing waits on
    /// its answer and the database is free again.
    pub fn execute_then(
        &self,
        statement: &str,
        arguments: &Map<String, Value>,
        timeout: Duration,
        cancel: &Arc<AtomicBool>,
        decide: impl FnOnce(Rows, Option<Instant>) -> Result<(), SqlError>,
    ) -> Result<(), SqlError> {
        let mut guard = lock(&self.connection);
        let Some(connection) = guard.as_mut() else {
            return Err(SqlError::Other("the database is not open: its catalog's setup was never applied".to_owned()));
        };
        if cancel.load(Ordering::Relaxed) {
            return Err(SqlError::Cancelled);
        }
        connection.busy_timeout(timeout).map_err(|err| SqlError::Other(err.to_string()))?;
        let deadline = Instant::now() + timeout;
        let mut decide = Some(decide);
        let outcome = bounded(connection, deadline, Some(cancel.clone()), |connection| {
            let transaction = connection.transaction()?;
            let (rows, writes) = {
                let mut prepared = transaction.prepare_cached(statement)?;
                for idx in 1..=prepared.parameter_count() {
                    let name = prepared.parameter_name(idx).map(|n| n[1..].to_owned()).unwrap_or_default();
                    let value = arguments.get(&name).map(to_sql).unwrap_or(SqlValue::Null);
                    prepared.raw_bind_parameter(idx, value)?;
                }
                let writes = !prepared.readonly();
                let columns: Vec<String> = prepared.column_names().map(str::to_owned).collect();
                let mut raw = prepared.raw_query();
                let mut rows = Rows { wrote: writes, ..Rows::default() };
                while let Some(row) = raw.next()? {
                    let mut record = Map::new();
                    for (idx, column) in columns.iter().enumerate() {
                        record.insert(column.clone(), from_sql(row.get_ref(idx)?));
                    }
                    if !rows.keep(record) {
                        break;
                    }
                }
                (rows, writes)
            };
            if !writes {
                transaction.commit()?;
                return Ok(Decided::Later(rows));
            }
            match decide.take().map(|decide| decide(rows, Some(deadline))) {
                Some(Err(refused)) => Ok(Decided::RolledBack(refused)),
                Some(Ok(())) | None => transaction.commit().map(|()| Decided::Committed),
            }
        });
        // However the work ended (a failed COMMIT, an interrupted ROLLBACK),
        // the next call must not find a transaction open.
        if !connection.is_autocommit()
            && let Err(err) = connection.execute_batch("ROLLBACK")
        {
            tracing::warn!("rolling back a statement's transaction: {err}");
        }
        drop(guard);
        match outcome.map_err(|err| classify(err, timeout, cancel))? {
            Decided::Committed => Ok(()),
            Decided::RolledBack(refused) => Err(refused),
            Decided::Later(rows) => decide.map_or(Ok(()), |decide| decide(rows, None)),
        }
    }

    /// Runs `statement` with `arguments` on the blocking pool and hands its
    /// rows to `finish` (rendering a tool's result), inside the statement's
    /// transaction: "statement → rows → finish → commit, or roll back".
    ///
    /// A statement that writes commits only once `finish` returned `Ok`;
    /// if `finish` fails, if the statement and `finish` together run past
    /// `timeout`, or if this future is dropped (the call was cancelled),
    /// the statement is rolled back and nothing was changed. The
    /// transaction is held while `finish` runs, so `finish` must never wait
    /// on a person or a client (steps that do run before the statement). A
    /// statement that writes nothing is committed before `finish` runs,
    /// which does not hold the database.
    ///
    /// Waiting for the database (one call at a time) and for `finish` holds
    /// no runtime thread: the statement runs on the blocking pool and
    /// `finish` is awaited here. An engine with an async client (PostgreSQL)
    /// does the same with its own transaction: `BEGIN`, the statement, then
    /// `finish` under the deadline, then `COMMIT` or `ROLLBACK`.
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
        let turn = Arc::clone(&self.turn)
            .acquire_owned()
            .await
            .map_err(|_| Aborted::Statement(SqlError::Other("the database is closed".to_owned())))?;
        // Dropping this future (a cancelled call) stops the statement, and a
        // transaction waiting for `finish` then rolls back.
        let cancel = CancelOnDrop::default();
        let flag = Arc::clone(&cancel.0);
        let (rows_out, rows_in) = tokio::sync::oneshot::channel::<(Rows, Option<Instant>)>();
        let (verdict_out, verdict_in) = std::sync::mpsc::sync_channel::<bool>(1);
        let (database, statement) = (Arc::clone(self), statement.to_owned());
        let job = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            database.execute_then(&statement, &arguments, timeout, &flag, |rows, deadline| {
                rows_out.send((rows, deadline)).map_err(|_| SqlError::Cancelled)?;
                let Some(deadline) = deadline else { return Ok(()) };
                match verdict_in.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(SqlError::RolledBack),
                    Err(RecvTimeoutError::Timeout) => Err(SqlError::Unfinished(timeout)),
                    Err(RecvTimeoutError::Disconnected) => Err(SqlError::Cancelled),
                }
            })
        });
        let ended = |joined: Result<Result<(), SqlError>, tokio::task::JoinError>| {
            joined.map_err(|err| SqlError::Other(format!("the statement did not finish: {err}"))).and_then(|r| r)
        };
        let Ok((rows, deadline)) = rows_in.await else {
            // The statement failed before it had rows.
            let err = ended(job.await).err();
            return Err(Aborted::Statement(
                err.unwrap_or_else(|| SqlError::Other("the statement gave no rows".to_owned())),
            ));
        };
        let finished = match deadline {
            None => finish(rows).await,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), finish(rows)).await {
                Ok(finished) => finished,
                Err(_) => {
                    drop(verdict_out);
                    let _ = job.await;
                    return Err(Aborted::Statement(SqlError::Unfinished(timeout)));
                }
            },
        };
        // The transaction may have stopped waiting (its deadline): it says so below.
        let _ = verdict_out.send(finished.is_ok());
        let committed = ended(job.await);
        drop(cancel);
        match (finished, committed) {
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(err)) => Err(Aborted::Statement(err)),
            (Err(reason), _) => Err(Aborted::Refused { reason, rolled_back: deadline.is_some() }),
        }
    }
}

/// How a statement's transaction ended.
enum Decided {
    /// It wrote, and the caller's decision let it commit.
    Committed,
    /// It wrote, and the caller's decision rolled it back (the transaction
    /// rolls back when dropped uncommitted).
    RolledBack(SqlError),
    /// It wrote nothing and is committed; its rows still wait for the caller.
    Later(Rows),
}

/// Runs `work` on `connection`, stopping it (SQLITE_INTERRUPT) at
/// `deadline` or once `cancel` is set.
pub(super) fn bounded<T>(
    connection: &mut Connection,
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
    work: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    connection.progress_handler(
        PROGRESS_OPS,
        Some(move || cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) || Instant::now() >= deadline),
    )?;
    let outcome = work(connection);
    connection.progress_handler(0, None::<fn() -> bool>)?;
    outcome
}

fn classify(err: rusqlite::Error, timeout: Duration, cancel: &AtomicBool) -> SqlError {
    match &err {
        rusqlite::Error::SqliteFailure(code, _) if code.code == rusqlite::ErrorCode::OperationInterrupted => {
            if cancel.load(Ordering::Relaxed) { SqlError::Cancelled } else { SqlError::Timeout(timeout) }
        }
        rusqlite::Error::SqliteFailure(code, message) if code.code == rusqlite::ErrorCode::ConstraintViolation => {
            SqlError::Constraint(message.clone().unwrap_or_else(|| err.to_string()))
        }
        _ => SqlError::Other(err.to_string()),
    }
}

fn to_sql(value: &Value) -> SqlValue {
    match value {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

fn from_sql(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(bytes) => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Blob(bytes) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
    }
}

#[cfg(test)]
mod tests;
