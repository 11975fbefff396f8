//! Unit tests of `sqlite`.

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
    assert!(err.message.contains("no such column: nme"), "{}", err.message);
    assert_eq!(err.kind, crate::effect::sql::engine::RefusalKind::Other);
    let positional = probe.check("SELECT name FROM t WHERE id = ?").unwrap_err();
    assert_eq!(positional.kind, crate::effect::sql::engine::RefusalKind::Positional);
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
    assert_eq!(before.len(), 1, "closing checkpoints the WAL: {:?}", before.iter().map(|f| &f.0).collect::<Vec<_>>());
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
fn a_new_database_is_created_in_wal_mode_without_a_rollback_journal() {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("new.db");
    let db = Database::new(Some(path.clone())).unwrap();
    applied(&db, &["CREATE TABLE t (x)"]);
    run(&db, "INSERT INTO t (x) VALUES (1)", DEFAULT_TIMEOUT).unwrap();
    let names: Vec<String> = files(scratch.path()).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["new.db", "new.db-shm", "new.db-wal"]);
    let other = Connection::open(&path).unwrap();
    let mode: String = other.query_row("PRAGMA journal_mode", [], |row| row.get(0)).unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(other.query_row("SELECT x FROM t", [], |row| row.get::<_, i64>(0)).unwrap(), 1);
}

#[test]
fn calls_wait_for_the_disk_after_a_setup_that_did_not() {
    let scratch = tempfile::tempdir().unwrap();
    let db = Database::new(Some(scratch.path().join("new.db"))).unwrap();
    let synchronous = |db: &Database| -> i64 {
        lock(&db.connection).as_ref().unwrap().query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap()
    };
    applied(&db, &["CREATE TABLE t (x)"]);
    assert_eq!(synchronous(&db), 2, "FULL after a setup committed");
    let failing = ["CREATE TABLE u (x)".to_owned(), "NOT SQL".to_owned()];
    assert!(apply_setup(&[SetupPlan { database: &db, statements: &failing, timeout: DEFAULT_TIMEOUT }]).is_err());
    assert_eq!(synchronous(&db), 2, "FULL after a setup rolled back");
    run(&db, "INSERT INTO t (x) VALUES (1)", DEFAULT_TIMEOUT).unwrap();
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
    let rows = run(&db, "SELECT (SELECT count(*) FROM notes) AS n, (SELECT count(*) FROM tags) AS t", DEFAULT_TIMEOUT);
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
    assert!(failure.error.message.contains("already exists"), "{failure:?}");
    assert_eq!(failure.error.cause, crate::effect::sql::engine::SqlCause::AlreadyThere, "{failure:?}");
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
        let late = within(
            db.transact(INSERT, Map::new(), Duration::from_millis(50), |_| std::future::pending::<Result<(), ()>>()),
        )
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
        let next =
            within(db.transact("SELECT count(*) AS n FROM orders", Map::new(), DEFAULT_TIMEOUT, |rows| async move {
                Ok::<_, ()>(Value::Object(rows.rows.into_iter().next().unwrap_or_default()))
            }))
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
        let failed = within(db.transact(overflow, Map::new(), DEFAULT_TIMEOUT, |_| async { Err::<(), ()>(()) })).await;
        let Err(Aborted::Statement(err)) = failed else { panic!("{failed:?}") };
        assert!(err.to_string().contains("integer overflow"), "{err}");
    });
    assert_eq!(count(&db), serde_json::json!({"n": 0}));
}

#[test]
fn a_setup_statement_that_fails_says_of_what_kind() {
    use crate::effect::sql::engine::SqlCause;
    let cause = |statements: &[&str]| {
        let database = Database::new(None).unwrap();
        let mut probe = database.probe(DEFAULT_TIMEOUT).unwrap();
        let mut last = Ok(());
        for statement in statements {
            last = probe.run_setup(statement);
        }
        last.map_err(|failure| failure.cause)
    };
    assert_eq!(cause(&["CREATE TABL t (x)"]), Err(SqlCause::Syntax));
    assert_eq!(cause(&["CREATE TABLE t (x)", "CREATE TABLE t (x)"]), Err(SqlCause::AlreadyThere));
    assert_eq!(
        cause(&["CREATE TABLE t (x PRIMARY KEY)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)"]),
        Err(SqlCause::AlreadyThere)
    );
    assert_eq!(cause(&["CREATE TABLE t (x NOT NULL)", "INSERT INTO t VALUES (NULL)"]), Err(SqlCause::Other));
    assert_eq!(cause(&["INSERT INTO nowhere VALUES (1)"]), Err(SqlCause::Missing));
    assert_eq!(cause(&["CREATE TABLE t (x)"]), Ok(()));
}
