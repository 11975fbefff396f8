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
mod tests {
    use super::*;
    use crate::effect::sql::engine::{DEFAULT_TIMEOUT, MAX_ROWS, MAX_TIMEOUT};

    /// Every file of `dir` with its bytes.
    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    fn applied(database: &Database, statements: &[&str]) {
        let statements: Vec<String> = statements.iter().map(|s| (*s).to_owned()).collect();
        apply_setup(&[SetupPlan { database, statements: &statements, timeout: DEFAULT_TIMEOUT }]).unwrap();
    }

    fn run(database: &Database, statement: &str, timeout: Duration) -> Result<Rows, SqlError> {
        database.execute(statement, &Map::new(), timeout, &Arc::default())
    }

    #[test]
    fn runs_statements_with_named_parameters() {
        let db = Database::new(None).unwrap();
        applied(&db, &["CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)"]);
        let probe = db.probe(DEFAULT_TIMEOUT).unwrap();
        assert_eq!(probe.check("INSERT INTO t (name) VALUES (:name) RETURNING id").unwrap(), vec!["name"]);
        let err = probe.check("SELECT nme FROM t").unwrap_err();
        assert!(err.contains("no such column: nme"), "{err}");
        let args: Map<String, Value> = serde_json::from_str(r#"{"name":"a"}"#).unwrap();
        let insert = "INSERT INTO t (name) VALUES (:name) RETURNING id";
        let rows = db.execute(insert, &args, DEFAULT_TIMEOUT, &Arc::default()).unwrap();
        assert_eq!(Value::Array(rows.rows.into_iter().map(Value::Object).collect()), serde_json::json!([{"id": 1}]));
        let again = db.execute(insert, &args, DEFAULT_TIMEOUT, &Arc::default());
        assert!(matches!(again, Err(SqlError::Constraint(_))), "{again:?}");
    }

    #[test]
    fn urls_resolve_beside_the_catalog() {
        let base = Path::new("/srv/cat");
        assert_eq!(parse_url("sqlite:x.db", base).unwrap(), Some(PathBuf::from("/srv/cat/x.db")));
        assert_eq!(parse_url("sqlite:///tmp/x.db", base).unwrap(), Some(PathBuf::from("/tmp/x.db")));
        assert_eq!(parse_url("sqlite::memory:", base).unwrap(), None);
        assert!(parse_url("mysql://u:secret@h/db", base).unwrap_err().contains("`mysql:`"));
    }

    #[test]
    fn a_probe_changes_no_byte_of_an_existing_file() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let path = dir.join("shop ?#%.db");
        {
            let db = Database::new(Some(path.clone())).unwrap();
            applied(&db, &["CREATE TABLE bookings (id INTEGER PRIMARY KEY, room TEXT)"]);
            run(&db, "INSERT INTO bookings (room) VALUES ('Focus')", DEFAULT_TIMEOUT).unwrap();
        }
        let before = files(dir);
        assert_eq!(
            before.len(),
            1,
            "closing checkpoints the WAL: {:?}",
            before.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        let db = Database::new(Some(path.clone())).unwrap();
        let mut probe = db.probe(DEFAULT_TIMEOUT).unwrap();
        assert_eq!(probe.check("SELECT room FROM bookings").unwrap(), Vec::<String>::new());
        probe.run_setup("DROP TABLE bookings").unwrap();
        probe.run_setup("CREATE TABLE other (x)").unwrap();
        assert!(probe.check("SELECT room FROM bookings").is_err());
        assert!(probe.run_setup("ATTACH 'elsewhere.db' AS elsewhere").is_err(), "ATTACH would create a file");
        drop(probe);
        assert_eq!(files(dir), before);
    }

    #[test]
    fn a_probe_of_a_missing_file_creates_nothing() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let db = Database::new(Some(dir.join("new.db"))).unwrap();
        let mut probe = db.probe(DEFAULT_TIMEOUT).unwrap();
        probe.run_setup("CREATE TABLE t (x)").unwrap();
        assert!(probe.check("SELECT x FROM t").is_ok());
        drop(probe);
        assert!(files(dir).is_empty());
    }

    #[test]
    fn a_probe_names_its_tables_and_their_columns() {
        let db = Database::new(None).unwrap();
        let mut probe = db.probe(DEFAULT_TIMEOUT).unwrap();
        probe
            .run_setup(
                "CREATE TABLE orders (id INTEGER, product TEXT); CREATE VIEW big AS SELECT id, 1 AS size FROM orders",
            )
            .unwrap();
        let (tables, columns) = probe.names();
        assert_eq!(tables, ["big", "orders"]);
        assert_eq!(columns, ["id", "size", "product"]);
    }

    #[test]
    fn a_reload_probes_the_open_connection_and_applies_only_a_changed_setup() {
        let db = Database::new(None).unwrap();
        applied(&db, &["CREATE TABLE notes (text TEXT)"]);
        run(&db, "INSERT INTO notes VALUES ('kept')", DEFAULT_TIMEOUT).unwrap();
        let probe = db.probe(DEFAULT_TIMEOUT).unwrap();
        assert!(probe.check("SELECT text FROM notes").is_ok(), "the probe sees the open database's tables");
        // The same setup is not run again (it is not idempotent).
        applied(&db, &["CREATE TABLE notes (text TEXT)"]);
        let changed = ["CREATE TABLE IF NOT EXISTS notes (text TEXT)", "CREATE TABLE tags (name TEXT)"];
        applied(&db, &changed);
        applied(&db, &changed);
        let rows =
            run(&db, "SELECT (SELECT count(*) FROM notes) AS n, (SELECT count(*) FROM tags) AS t", DEFAULT_TIMEOUT);
        assert_eq!(Value::Object(rows.unwrap().rows.remove(0)), serde_json::json!({"n": 1, "t": 0}));
    }

    #[test]
    fn a_failed_setup_commits_nothing_anywhere() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let first = Database::new(Some(dir.join("first.db"))).unwrap();
        let second = Database::new(None).unwrap();
        let good = vec!["CREATE TABLE t (x)".to_owned()];
        let bad = vec!["CREATE TABLE u (y)".to_owned(), "CREATE TABLE u (y)".to_owned()];
        let plans = [
            SetupPlan { database: &first, statements: &good, timeout: DEFAULT_TIMEOUT },
            SetupPlan { database: &second, statements: &bad, timeout: DEFAULT_TIMEOUT },
        ];
        let failure = apply_setup(&plans).unwrap_err();
        assert_eq!((failure.plan, failure.statement), (1, Some(1)), "{failure:?}");
        assert!(failure.message.contains("already exists"), "{failure:?}");
        assert!(files(dir).is_empty(), "the file it created is gone");
        assert_eq!(first.applied(), None);
        assert!(matches!(run(&second, "SELECT y FROM u", DEFAULT_TIMEOUT), Err(SqlError::Other(_))));
    }

    const FOREVER: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";

    #[test]
    fn a_runaway_statement_stops_at_its_timeout() {
        let db = Database::new(None).unwrap();
        applied(&db, &[]);
        let err = run(&db, FOREVER, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, SqlError::Timeout(_)), "{err:?}");
        assert!(err.to_string().contains("timeout (50ms)"), "{err}");
        // The connection is usable again, with no handler left behind.
        assert_eq!(run(&db, "SELECT 1 AS one", DEFAULT_TIMEOUT).unwrap().rows.len(), 1);
    }

    #[test]
    fn a_cancelled_call_stops_its_statement() {
        let db = Arc::new(Database::new(None).unwrap());
        applied(&db, &[]);
        let cancel = Arc::new(AtomicBool::new(false));
        let (done, finished) = std::sync::mpsc::channel();
        let (db2, cancel2) = (db.clone(), cancel.clone());
        std::thread::spawn(move || {
            let _ = done.send(db2.execute(FOREVER, &Map::new(), MAX_TIMEOUT, &cancel2));
        });
        drop(CancelOnDrop(cancel));
        let outcome = finished.recv_timeout(Duration::from_secs(20)).expect("the statement stopped");
        assert!(matches!(outcome, Err(SqlError::Cancelled)), "{outcome:?}");
    }

    #[test]
    fn rows_are_capped() {
        let db = Database::new(None).unwrap();
        applied(&db, &[]);
        let many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) SELECT x FROM c";
        let rows = run(&db, many, DEFAULT_TIMEOUT).unwrap();
        assert_eq!((rows.rows.len(), rows.truncated), (MAX_ROWS, true));
        let exact = format!("{many} WHERE x <= {MAX_ROWS}");
        let rows = run(&db, &exact, DEFAULT_TIMEOUT).unwrap();
        assert_eq!((rows.rows.len(), rows.truncated), (MAX_ROWS, false));
    }

    /// An in-memory database with an empty `orders (n)` table, for `transact`.
    fn orders() -> Arc<Database> {
        let db = Arc::new(Database::new(None).unwrap());
        applied(&db, &["CREATE TABLE orders (n INTEGER)"]);
        db
    }

    fn count(db: &Database) -> Value {
        Value::Object(run(db, "SELECT count(*) AS n FROM orders", DEFAULT_TIMEOUT).unwrap().rows.remove(0))
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    /// Bounds a wait in a test.
    async fn within<T>(work: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), work).await.expect("finished within the test's bound")
    }

    const INSERT: &str = "INSERT INTO orders (n) VALUES (1) RETURNING n";

    #[test]
    fn a_write_commits_only_when_finish_succeeds() {
        let db = orders();
        runtime().block_on(async {
            let refused = within(db.transact(INSERT, Map::new(), DEFAULT_TIMEOUT, |rows| async move {
                assert_eq!(rows.rows.len(), 1, "finish sees the statement's rows");
                Err::<(), _>("no")
            }))
            .await;
            assert!(matches!(refused, Err(Aborted::Refused { reason: "no", rolled_back: true })), "{refused:?}");
            assert_eq!(count(&db), serde_json::json!({"n": 0}));
            let done = within(
                db.transact(INSERT, Map::new(), DEFAULT_TIMEOUT, |rows| async move { Ok::<_, ()>(rows.rows.len()) }),
            )
            .await;
            assert!(matches!(done, Ok(1)), "{done:?}");
            assert_eq!(count(&db), serde_json::json!({"n": 1}));
        });
    }

    #[test]
    fn a_write_whose_result_is_not_ready_by_the_timeout_rolls_back() {
        let db = orders();
        runtime().block_on(async {
            let late =
                within(db.transact(INSERT, Map::new(), Duration::from_millis(50), |_| {
                    std::future::pending::<Result<(), ()>>()
                }))
                .await;
            let Err(Aborted::Statement(err)) = late else { panic!("{late:?}") };
            assert!(matches!(err, SqlError::Unfinished(_)), "{err:?}");
            assert!(err.to_string().contains("timeout (50ms); the statement was rolled back"), "{err}");
        });
        assert_eq!(count(&db), serde_json::json!({"n": 0}));
    }

    #[test]
    fn a_call_cancelled_while_its_result_renders_rolls_back() {
        let db = orders();
        runtime().block_on(async {
            let (started, rendering) = tokio::sync::oneshot::channel();
            let call = db.transact(INSERT, Map::new(), MAX_TIMEOUT, |_| async move {
                let _ = started.send(());
                std::future::pending::<Result<(), ()>>().await
            });
            tokio::select! {
                _ = call => panic!("the result never finishes"),
                _ = within(rendering) => {}
            }
            // The call is dropped: the transaction is rolled back and the
            // database free for the next call at once (its timeout is an hour).
            let next = within(db.transact(
                "SELECT count(*) AS n FROM orders",
                Map::new(),
                DEFAULT_TIMEOUT,
                |rows| async move { Ok::<_, ()>(Value::Object(rows.rows.into_iter().next().unwrap_or_default())) },
            ))
            .await;
            assert_eq!(next.unwrap(), serde_json::json!({"n": 0}));
        });
    }

    #[test]
    fn a_read_does_not_hold_the_database_while_its_result_renders() {
        let db = orders();
        run(&db, INSERT, DEFAULT_TIMEOUT).unwrap();
        runtime().block_on(async {
            let select = "SELECT n FROM orders";
            let outcome = within(db.transact(select, Map::new(), DEFAULT_TIMEOUT, |_| async {
                // Another call on the same database, while this result renders.
                let inner = db.transact(INSERT, Map::new(), DEFAULT_TIMEOUT, |_| async { Ok::<_, ()>(()) }).await;
                Err::<(), _>(inner.is_ok())
            }))
            .await;
            assert!(
                matches!(outcome, Err(Aborted::Refused { reason: true, rolled_back: false })),
                "the write ran, and the read had nothing to roll back: {outcome:?}"
            );
        });
        assert_eq!(count(&db), serde_json::json!({"n": 2}));
    }

    #[test]
    fn a_failed_statement_never_calls_finish() {
        let db = orders();
        runtime().block_on(async {
            let overflow = "INSERT INTO orders (n) VALUES (abs(-9223372036854775808))";
            // A finish that ran would make this `Refused`.
            let failed =
                within(db.transact(overflow, Map::new(), DEFAULT_TIMEOUT, |_| async { Err::<(), ()>(()) })).await;
            let Err(Aborted::Statement(err)) = failed else { panic!("{failed:?}") };
            assert!(err.to_string().contains("integer overflow"), "{err}");
        });
        assert_eq!(count(&db), serde_json::json!({"n": 0}));
    }
}
